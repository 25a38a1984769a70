"""The security perimeter of a Tollgate process.

* :mod:`graph.perimeter.config` — the egress client and governance policy, built from settings.
* :mod:`graph.perimeter.egress_transport` — the pinned HTTP transport every outbound request takes.
* :mod:`graph.perimeter.credentials` — tools' per-owner secrets, encrypted at rest.
"""

__all__: list[str] = []
