"""What every Tollgate process sets up once.

* :mod:`graph.process.event_loop` — uvloop.
* :mod:`graph.process.gc_tuning` — start-up objects frozen out of the collector's scans, young collections rarer.
* :mod:`graph.process.config_errors` — start-up errors a person can act on.
"""

__all__: list[str] = []
