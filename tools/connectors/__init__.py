"""Connectors to owners' own accounts on open-standard servers (CalDAV; IMAP and SMTP to come).

Every connection goes through the egress gate (:class:`graph.egress_transport.EgressClient`),
allowed to reach the account's own server only; a password travels in an ``Authorization``
header and never appears in an error, a log line or a URL.
"""
