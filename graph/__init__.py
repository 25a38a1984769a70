"""Tollgate's turn graph and what runs it, in named parts.

The turn itself, at the top: :mod:`graph.state` (checkpointed state and the run context),
:mod:`graph.turn` (the graph's wiring), :mod:`graph.events` and :mod:`graph.event_contract` (typed
turn events and their checker), :mod:`graph.services` (a turn's collaborators). Running turns:
:mod:`graph.runner` (ownership, one turn per thread, approvals by id, clean ends),
:mod:`graph.slots` (admission), :mod:`graph.threads` (kinds of thread), :mod:`graph.profiles`,
:mod:`graph.settings` and :mod:`graph.app` (assembly from settings).

* :mod:`graph.store` — PostgreSQL: the database and its migrations, the checkpointer, thread
  leases, and the owner scope of row-level security.
* :mod:`graph.ledger` — what was decided and what ran: approvals, the effects ledger, the audit
  log, and the approval contract's checker.
* :mod:`graph.models` — chat models from settings: OpenAI-compatible providers, retries, fallbacks.
* :mod:`graph.perimeter` — the security perimeter: the pinned egress transport, tools' secrets.
* :mod:`graph.background` — background runs, triggers and reminders on the job queue.
* :mod:`graph.studio` — what ``langgraph dev`` loads: the graph, its checkpointer, its authenticator.
* :mod:`graph.process` — per process: the event loop, the collector, start-up errors.

``graph._env`` sets the process-wide safety switches; importing this package sets them before
LangGraph is imported.
"""

import tollgate.graph._env  # noqa: F401  - must run before langgraph is imported
