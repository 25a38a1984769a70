"""One error taxonomy for Tollgate.

Every refusal, failure and denial in Tollgate is a :class:`TollgateError` with a stable
``code`` so a result, an event or an HTTP response can say *why* it failed. Subclasses keep
their facts as attributes and build their own message; identifiers are quoted with ``!r``.
Messages never contain argument values, tokens or secrets: only names, counts and kinds.
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = [
    "HTTP_STATUS",
    "ErrorCode",
    "TollgateError",
    "InvalidArgs",
    "OffListId",
    "NotFound",
    "PermissionDenied",
    "ApprovalInvalid",
    "ApprovalExpired",
    "ThreadReadOnly",
    "EgressDenied",
    "Transient",
    "OutcomeUnknown",
    "Unavailable",
]

ErrorCode = Literal[
    "invalid_args",
    "off_list_id",
    "not_found",
    "permission_denied",
    "approval_invalid",
    "approval_expired",
    "thread_read_only",
    "egress_denied",
    "transient",
    "unavailable",
]
"""The closed set of failure kinds a caller can branch on."""


HTTP_STATUS: Final[dict[ErrorCode, int]] = {
    "invalid_args": 422,
    "off_list_id": 422,
    "egress_denied": 422,
    "not_found": 404,
    "permission_denied": 404,
    "approval_invalid": 409,
    "approval_expired": 409,
    "thread_read_only": 409,
    "transient": 503,
    "unavailable": 503,
}
"""The HTTP status of each code on Tollgate's API (a refusal there looks like a missing item)."""


class TollgateError(Exception):
    """Base of every Tollgate error; ``code`` names the failure kind."""

    code: ErrorCode = "unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, str]:
        """The wire form: ``{"code": ..., "message": ...}``."""
        return {"code": self.code, "message": self.message}


class InvalidArgs(TollgateError):
    """A tool call did not match its closed schema (unknown tool, key, type or value)."""

    code: ErrorCode = "invalid_args"

    def __init__(self, tool: str, violations: list[str]) -> None:
        self.tool = tool
        self.violations = list(violations)
        super().__init__(f"invalid arguments for {tool!r}: {len(self.violations)} violation(s)")


class OffListId(TollgateError):
    """An id is not a member of the server-recorded recent list for its kind."""

    code: ErrorCode = "off_list_id"

    def __init__(self, kind: str, reason: str) -> None:
        self.kind = kind
        self.reason = reason
        super().__init__(f"id of kind {kind!r} refused: {reason}")


class NotFound(TollgateError):
    """The owner has no such item (or it is not theirs: the two are indistinguishable)."""

    code: ErrorCode = "not_found"

    def __init__(self, kind: str, item_id: str) -> None:
        self.kind = kind
        self.item_id = item_id
        super().__init__(f"no {kind} with id {item_id!r}")


class PermissionDenied(TollgateError):
    """The action's tier forbids it here (mustlist, blocklist, unclassified) or the caller is not the owner."""

    code: ErrorCode = "permission_denied"

    def __init__(self, subject: str, reason: str) -> None:
        self.subject = subject
        self.reason = reason
        super().__init__(f"{subject!r} refused: {reason}")


class ApprovalInvalid(TollgateError):
    """An approval token is malformed, tampered, foreign, reused or no longer matches its plan."""

    code: ErrorCode = "approval_invalid"

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"approval refused: {reason}")


class ApprovalExpired(TollgateError):
    """An approval token is genuine but past its expiry."""

    code: ErrorCode = "approval_expired"

    def __init__(self, expired_at: str) -> None:
        self.expired_at = expired_at
        super().__init__(f"approval expired at {expired_at}")


class ThreadReadOnly(TollgateError):
    """A chat message was sent to a thread that only the server writes (a background run's, the inbox)."""

    code: ErrorCode = "thread_read_only"

    def __init__(self, thread_id: str, kind: str) -> None:
        self.thread_id = thread_id
        self.kind = kind
        super().__init__(f"thread {thread_id!r} is a {kind} thread: it is read-only for chat")


_ALLOWED_BY: Final = {
    "not_allowlisted": "TOLLGATE_EGRESS_ALLOW_HOSTS",
    "non_global_address": "TOLLGATE_CONNECTOR_PRIVATE_NETWORKS for one owner's own calendar or mail server; "
                          "TOLLGATE_EGRESS_ALLOW_NETWORKS in development",
    "embedded_ipv4": "TOLLGATE_CONNECTOR_PRIVATE_NETWORKS for one owner's own calendar or mail server; "
                     "TOLLGATE_EGRESS_ALLOW_NETWORKS in development",
    "plaintext_refused": "TOLLGATE_CONNECTOR_PLAINTEXT_HOSTS",
}
"""The setting that would allow a refused destination, by reason (none: it is never allowed,
a cloud metadata endpoint say)."""


class EgressDenied(TollgateError):
    """An outbound destination was refused by the egress gate."""

    code: ErrorCode = "egress_denied"

    def __init__(self, reason: str) -> None:
        self.reason = reason
        allowed_by = _ALLOWED_BY.get(reason)
        super().__init__(f"egress refused: {reason}" + (f" (an operator can allow it: {allowed_by})" if allowed_by else ""))


class Transient(TollgateError):
    """A failure that may succeed on retry (connection lost, timeout, serialization conflict)."""

    code: ErrorCode = "transient"

    def __init__(self, what: str, message: str | None = None) -> None:
        self.what = what
        super().__init__(message or f"transient failure in {what}")


class Unavailable(TollgateError):
    """A needed collaborator (model, database, tool) is not available."""

    code: ErrorCode = "unavailable"

    def __init__(self, what: str, message: str | None = None) -> None:
        self.what = what
        super().__init__(message or f"{what} is unavailable")


class OutcomeUnknown(Unavailable):
    """A remote write was interrupted and its service cannot say whether it happened; it is not run again."""

    reason = "outcome_unknown"

    def __init__(self, action: str) -> None:
        super().__init__(f"the outcome of {action}")
        self.message = (f"I can't tell whether {action} went through: it was interrupted and its service could "
                        "not confirm it. Please check before asking again.")
