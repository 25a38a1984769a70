"""Background runs: ordinary turns driven by workers on a PostgreSQL job queue (procrastinate).

* :mod:`graph.background.api` — the service the HTTP routes call: create, list, get, cancel,
  and :func:`~graph.background.api.decide_background` for a run's approval.
* :mod:`graph.background.worker` — :func:`~graph.background.worker.run_worker` (``tollgate worker``)
  and :func:`~graph.background.worker.start_in_process_worker` (``make run``).
* :mod:`graph.background.executor` — how a job drives a run's turn; :mod:`~graph.background.tasks`
  the queue's tasks; :mod:`~graph.background.queue` the schema and deferral.
* :mod:`graph.background.triggers` and :mod:`graph.background.reminders` — the periodic evaluators.
* :mod:`graph.background.store` and :mod:`graph.background.delivery` — rows, ledger, delivery.

This package's ``__init__`` imports nothing: the tool registry imports the offer tool from it
while :mod:`graph.app` (which the service and workers need) imports the registry.
"""

__all__: list[str] = []
