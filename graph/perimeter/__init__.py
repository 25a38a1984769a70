"""The security perimeter of a Tollgate process, beside the egress gate (:mod:`tools.perimeter`).

* :mod:`graph.perimeter.credentials` — tools' per-owner secrets, encrypted at rest.
* :mod:`graph.perimeter.accounts` — owners' connected accounts (their own CalDAV and IMAP servers).
"""

__all__: list[str] = []
