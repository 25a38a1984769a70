"""Connectors to owners' own accounts on open-standard servers: CalDAV calendars, IMAP and SMTP mail.

Every connection goes through the egress gate (:class:`tools.perimeter.egress_transport.EgressClient`),
allowed to reach the account's own servers only; a password travels inside the protocol's own
authentication and never appears in an error, a log line or a URL.
"""
