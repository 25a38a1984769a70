"""PostgreSQL: the database and its migrations, the checkpointer, thread leases, row-level security.

* :mod:`graph.store.db` — the pool, migrations at start-up, the embedded server or ``DATABASE_URL``;
  :mod:`graph.store.embedded` — the embedded server's status, stop and reset; :mod:`graph.store.migrations`.
* :mod:`graph.store.checkpointer` — LangGraph's saver, a connection per operation, writes fenced;
  :mod:`graph.store.checkpoint_guard` — the strict serializer.
* :mod:`graph.store.leases` — one turn per thread, across processes, with fencing tokens.
* :mod:`graph.store.owner_scope` — whose rows a transaction may see.
"""

__all__: list[str] = []
