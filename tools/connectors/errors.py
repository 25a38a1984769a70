"""The refusals every connector raises, each naming the server's kind, never its address or a secret."""

from __future__ import annotations

import ssl

from tollgate.policies.errors import ErrorCode, TollgateError, Transient

__all__ = ["AccountRefused", "ServerAway", "certificate_refused"]


class AccountRefused(TollgateError):
    """The server refused the account's username or password (nothing was stored or changed)."""

    code: ErrorCode = "permission_denied"

    def __init__(self, server: str = "calendar server") -> None:
        super().__init__(f"the {server} refused the username or password")


class ServerAway(Transient):
    """The server could not be reached (or answered with a server error): safe calls are retried."""

    def __init__(self, server: str = "calendar server") -> None:
        super().__init__(server, f"the {server} could not be reached; nothing was changed, try again in a moment")


def certificate_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is (or wraps) a server certificate that did not verify for its host."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
