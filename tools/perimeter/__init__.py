"""The egress gate every outbound request of a tool goes through, and its configuration.

* :mod:`tools.perimeter.egress_transport` — the pinned HTTP transport every outbound request takes.
* :mod:`tools.perimeter.config` — the egress client and governance policy, built from settings.

Tools' per-owner secrets and connected accounts are the runtime's (:mod:`graph.perimeter`).
"""

__all__: list[str] = []
