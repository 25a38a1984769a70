"""The HTTP API's wire models: request bodies, responses and the one error shape."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args
from zoneinfo import available_timezones

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainValidator, StringConstraints
from typing_extensions import TypeAliasType

from tollgate.graph.events import EventType
from tollgate.graph.profiles import LOCALE_PATTERN
from tollgate.policies.errors import ErrorCode
from tollgate.policies.hitl import MAX_ACTIONS
from tollgate.policies.storable import MAX_DEPTH, depth_of, unstorable

if TYPE_CHECKING:
    from tollgate.graph.runner import PendingApproval

__all__ = [
    "APPROVAL_ID_PATTERN",
    "THREAD_ID_PATTERN",
    "AccountOut",
    "AccountsOut",
    "ApiErrorCode",
    "AuditVerdictOut",
    "CalDavAccountIn",
    "ApprovalOut",
    "ApprovalsOut",
    "ApproveBody",
    "ChatRequest",
    "DecidedApprovalOut",
    "DecisionRequest",
    "EditBody",
    "ErrorBody",
    "EventOut",
    "EventsQuery",
    "HealthOut",
    "MessageOut",
    "RejectBody",
    "SSE_MESSAGE_SCHEMA",
    "ThreadDetail",
    "ThreadQuery",
    "ThreadStatus",
    "ThreadSummary",
    "ThreadsOut",
    "MeOut",
    "MePatch",
    "ProfileOut",
    "StopOut",
    "ThreadPatch",
    "ThreadsQuery",
    "storable",
    "TurnResult",
    "runner_decision",
]

THREAD_ID_PATTERN = r"^[A-Za-z0-9_.:@-]{1,128}$"
"""Thread ids addressable over HTTP (no ``/``, so they fit in a path segment)."""
APPROVAL_ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"
"""Approval ids (``apv_`` + hex)."""
_MAX_MESSAGE = 8000
_MAX_NOTE = 2000


def stored(text: str) -> str:
    """``text`` if PostgreSQL can store it; else ``ValueError`` (a 422): NUL and unpaired surrogates
    are refused, never stored altered."""
    if unstorable(text):
        raise ValueError("text contains NUL or unpaired surrogate characters")
    return text


def storable(text: str) -> str:
    """``text`` if PostgreSQL can store it and it is not blank; else ``ValueError`` (a 422)."""
    if not stored(text).strip():
        raise ValueError("text must not be blank")
    return text


# What the schema says of every string the server stores: no NUL, no unpaired surrogate (the
# validators above refuse them with a clear message; the patterns say the same to clients and
# to schema-driven tools). JSON Schema patterns, written with Python's (and ECMA-262's) escapes.
_REFUSED = r"\x00\ud800-\udfff"
STORED_PATTERN = rf"^[^{_REFUSED}]*$"
"""Any text PostgreSQL can store: no NUL, no unpaired surrogate."""
NOT_BLANK_PATTERN = rf"^[^{_REFUSED}]*[^\s{_REFUSED}][^{_REFUSED}]*$"
"""The same, and not blank."""
_LINE_PATTERN = r"^[^\x00-\x1f\x7f\ud800-\udfff]*$"
"""One line of storable text (no control characters)."""


def _says(pattern: str) -> Any:
    """The schema's ``pattern`` (what the validators refuse, stated for clients)."""
    return Field(json_schema_extra={"pattern": pattern})


StoredText = Annotated[str, AfterValidator(stored), _says(STORED_PATTERN)]
"""Text the server stores (it may be empty or blank)."""
StoredObject = Annotated[dict[str, "StoredJson"], Field(json_schema_extra={"propertyNames": {"pattern": STORED_PATTERN}})]
"""A JSON object whose keys are storable text."""
StoredJson = TypeAliasType("StoredJson", "StoredText | int | float | bool | None | list[StoredJson] | StoredObject")
"""A JSON value whose strings (keys too) are :data:`StoredText` (what the schema says of edited arguments)."""
Message = Annotated[str, StringConstraints(min_length=1, max_length=_MAX_MESSAGE), AfterValidator(storable),
                    _says(NOT_BLANK_PATTERN)]
Note = Annotated[str, StringConstraints(min_length=1, max_length=_MAX_NOTE), AfterValidator(storable),
                 _says(NOT_BLANK_PATTERN)]
ThreadId = Annotated[str, StringConstraints(pattern=THREAD_ID_PATTERN)]

ApiErrorCode = ErrorCode | Literal["unauthenticated", "insufficient_scope", "rate_limited", "method_not_allowed",
                                   "cancelled"]
"""Every ``code`` an error response can carry: the taxonomy plus the transport's own."""
ThreadStatus = Literal["idle", "running", "awaiting_approval"]
"""``running``: a turn's events are still arriving; ``awaiting_approval``: one is pending."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChatRequest(_Wire):
    """``POST /v1/chat``: a user message, on a new thread or one of the caller's."""

    thread_id: ThreadId | None = None
    """An existing thread of the caller; omitted, a new thread is created (its id is in every event)."""
    message: Message
    """The user's message (1-8000 characters, not blank)."""


class ApproveBody(_Wire):
    """Run the action exactly as previewed."""

    type: Literal["approve"]
    """The decision."""


def _bounded(args: Any) -> dict[str, Any]:
    if not isinstance(args, dict):
        raise ValueError("arguments must be an object")
    if depth_of(args) > MAX_DEPTH:
        raise ValueError(f"arguments must not nest deeper than {MAX_DEPTH} levels")
    if _any_unstorable(args):
        raise ValueError("arguments contain NUL or unpaired surrogate characters")
    return args


def _any_unstorable(value: Any) -> bool:
    """Whether a string anywhere in ``value`` (a key or a value, at any depth) cannot be stored."""
    if isinstance(value, str):
        return unstorable(value)
    if isinstance(value, dict):
        return any(_any_unstorable(k) or _any_unstorable(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_any_unstorable(v) for v in value)
    return False


class EditBody(_Wire):
    """The same action with new arguments, checked like the model's were: shown again as a new
    approval with its own preview, or run at once with ``run``."""

    type: Literal["edit"]
    """The decision."""
    args: Annotated[dict[str, Any], PlainValidator(_bounded, json_schema_input_type=StoredObject)]
    """The new arguments (positions such as ``"#3"`` resolve against the thread's latest list)."""
    run: bool = False
    """Run the edited call at once instead of returning its new preview for approval."""


class RejectBody(_Wire):
    """Run nothing; the reply says so and quotes the reason."""

    type: Literal["reject"]
    """The decision."""
    message: Note | None = None
    """Why (optional)."""


SingleDecision = Annotated[ApproveBody | EditBody | RejectBody, Field(discriminator="type")]
"""One decision, discriminated by ``type``."""


class DecisionsBody(_Wire):
    """One decision per action of the request, in the order of its ``actions``."""

    decisions: Annotated[list[SingleDecision], Field(min_length=1, max_length=MAX_ACTIONS)]
    """The decisions, in order (the count must be the request's)."""


DecisionRequest = ApproveBody | EditBody | RejectBody | DecisionsBody
"""``POST /v1/approvals/{id}/decision``: one decision (a request of one action), or ``decisions``."""


def _runner_one(body: ApproveBody | EditBody | RejectBody, name: str) -> dict[str, Any]:
    if isinstance(body, EditBody):
        return {"type": "edit", "edited_action": {"name": name, "args": body.args}, "run": body.run}
    if isinstance(body, RejectBody):
        return {"type": "reject", "message": body.message}
    return {"type": "approve"}


def runner_decision(body: DecisionRequest, names: list[str]) -> dict[str, Any] | list[dict[str, Any]]:
    """The runner's decision value(s); ``names`` are the request's actions' function names, in order
    (an edit names its own action: only its details change). A count that does not match the
    request is left for the runner to refuse."""
    if isinstance(body, DecisionsBody):
        return [_runner_one(d, names[min(i, len(names) - 1)]) for i, d in enumerate(body.decisions)]
    return _runner_one(body, names[0])


class ThreadsQuery(_Wire):
    """Query of ``GET /v1/threads`` (unknown parameters are refused)."""

    limit: int = Field(default=50, ge=1, le=200)
    """At most this many threads."""
    kind: Literal["chat", "run", "inbox", "all"] = "chat"
    """Which threads: chat threads (the default), background runs' threads, the inbox, or all."""
    q: Annotated[StoredText, Field(max_length=200)] = ""
    """Only threads whose title or messages contain this (case-insensitive)."""


class ThreadPatch(_Wire):
    """Body of ``PATCH /v1/threads/{id}``."""

    title: Annotated[StoredText, Field(max_length=200)]
    """The thread's new title; empty gives it back its first message."""


# The IANA zones this machine knows, as an enum: the schema itself says which values are valid.
TimezoneName = Literal[tuple(sorted(available_timezones()))]  # type: ignore[valid-type]


class MePatch(_Wire):
    """Body of ``PATCH /v1/me``: the fields to set (``null`` clears one)."""

    display_name: Annotated[str, AfterValidator(stored), Field(
        max_length=200, pattern=r"^[^\x00-\x1f\x7f]*$", json_schema_extra={"pattern": _LINE_PATTERN})] | None = None
    timezone: TimezoneName | None = Field(default=None, description="An IANA timezone, e.g. Europe/Paris.")
    locale: str | None = Field(default=None, max_length=40, pattern=LOCALE_PATTERN,
                               description="A language tag, e.g. fr-FR.")


class ProfileOut(BaseModel):
    """What the owner set themselves (``null``: not set)."""

    display_name: str | None
    timezone: str | None
    locale: str | None


class MeOut(BaseModel):
    """``GET /v1/me``."""

    owner_id: str
    """The owner the credential proves."""
    display_name: str
    """The name in effect: the profile's, else the token's."""
    timezone: str
    """The timezone in effect: the profile's, else the token's ``zoneinfo``, else the server's default."""
    locale: str | None
    """The locale in effect: the profile's, else the token's."""
    scopes: list[str]
    """What the credential grants (empty for a stored token, which grants every route)."""
    profile: ProfileOut
    """What the owner set themselves."""


class StopOut(BaseModel):
    """``POST /v1/threads/{id}/stop``."""

    stopped: bool
    """Whether a turn was running on the thread (in any server process) and was told to stop."""


class ThreadQuery(_Wire):
    """Query of ``GET /v1/threads/{id}`` (unknown parameters are refused)."""

    limit: int = Field(default=100, ge=1, le=500)
    """At most this many recent messages."""


class EventsQuery(_Wire):
    """Query of ``GET /v1/threads/{id}/events`` (unknown parameters are refused)."""

    turn_id: str = Field(default="", pattern=r"^[A-Za-z0-9_:-]{0,200}$")
    """Only this turn's events; empty: the thread's (from ``Last-Event-ID``, or its latest turn without one)."""


class ErrorBody(BaseModel):
    """Every error response: a stable code to branch on and a message without secrets."""

    code: ApiErrorCode
    """The failure kind."""
    message: str
    """What went wrong (names, counts and kinds only)."""
    violations: list[str] = Field(default_factory=list)
    """For ``invalid_args``: where the request broke its schema."""


class EventOut(BaseModel):
    """One turn event (the SSE ``data`` of an event, as JSON)."""

    type: EventType
    """The event kind (also the SSE ``event`` field)."""
    id: int
    """The event's id in the event log: global and increasing (the SSE ``id``, what ``Last-Event-ID`` names)."""
    seq: int
    """Strictly increasing within a turn, across its interrupt and resume."""
    turn_id: str
    """The turn it belongs to."""
    ts: str
    """Server time, ISO 8601."""
    data: dict[str, Any]
    """Kind-specific payload (never tokens or secrets)."""
    thread_id: str
    """The thread."""


SSE_MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "One Server-Sent Events message (`text/event-stream`).",
    "required": ["data"],
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$", "description": "The event's `id` in the event log."},
        "event": {"type": "string", "enum": sorted(get_args(EventType)), "description": "The event's `type`."},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": EventOut.model_json_schema(),
            "description": (
                "The event as JSON (`EventOut`). A run that failed mid-stream ends with an `error` "
                "event whose `data` has `fatal: true`."
            ),
        },
        "retry": {"type": "integer"},
    },
}
"""How each SSE message of a turn stream is documented (OpenAPI 3.1: ``schema`` describes one message)."""


class CardWarningOut(BaseModel):
    """One warning or note of an approval card."""

    code: str
    """What it is about: ``not_requested``, ``third_party_value``, ``instructions``, ``unknown_source``
    (warnings a careful reviewer acts on), ``named_content``, ``read_content`` (notes), ``outbound``, ``dlp``."""
    text: str
    """The sentence the card shows."""


class ApprovalActionOut(BaseModel):
    """One action of a pending approval request."""

    approval_id: str
    """The action's own approval id."""
    tool: str
    """Tool name."""
    action: str
    """Action name."""
    preview: str
    """The server-rendered description of what it will do."""
    args: dict[str, Any]
    """The exact arguments it will run with."""
    allowed_decisions: list[str]
    """The decisions a reviewer may take for it."""
    provenance: dict[str, str] = Field(default_factory=dict)
    """Where each argument's value came from ("typed by you", "from someone else's content: …")."""
    warnings: list[CardWarningOut] = Field(default_factory=list)
    """The card's warnings (``⚠``) and notes (``ⓘ``), each with its code; also at the top of ``preview``."""


class ApprovalOut(BaseModel):
    """A pending approval request: what will run if approved. The top-level fields describe its
    first action (all of it, for a request of one action); ``actions`` lists every action, and a
    decision of the request carries one decision per action, in that order."""

    approval_id: str
    """Its id (path parameter of the decision route)."""
    thread_id: str
    """Its thread."""
    tool: str
    """Tool name."""
    action: str
    """Action name."""
    preview: str
    """The server-rendered description of what will run."""
    args: dict[str, Any]
    """The exact arguments that will run (what an ``edit`` replaces)."""
    expires_at: str
    """ISO 8601 expiry; after it the approval resolves as rejected."""
    actions: list[ApprovalActionOut] = Field(default_factory=list)
    """Every action of the request, in order."""

    @classmethod
    def of(cls, pending: PendingApproval) -> ApprovalOut:
        """The runner's pending approval, as the API shows it."""
        return cls(**dataclasses.asdict(pending))


class ApprovalsOut(BaseModel):
    """``GET /v1/approvals``."""

    approvals: list[ApprovalOut]
    """The caller's pending approvals, newest first."""


class TurnResult(BaseModel):
    """The outcome of one run, when the client asks for ``application/json`` instead of a stream."""

    thread_id: str
    """The thread."""
    turn_id: str
    """The turn."""
    outcome: str | None
    """What really happened (``read``, ``executed``, ``rejected``, ``proposed``...)."""
    reply: str | None
    """The reply, when the run completed the turn."""
    approval: ApprovalOut | None
    """The approval request, when the run stopped for one."""
    events: list[EventOut]
    """The run's events, in order."""


class MessageOut(BaseModel):
    """One message of a thread's transcript."""

    role: Literal["user", "assistant"]
    """Who said it."""
    content: str
    """The text."""
    turn_id: str
    """The turn it belongs to."""
    created_at: datetime
    """When it was recorded."""


class ThreadSummary(BaseModel):
    """A thread in the caller's list."""

    thread_id: str
    """The thread id."""
    title: str
    """Its title: the start of its first message, or the name its owner gave it."""
    status: ThreadStatus
    """Where the thread stands."""
    kind: Literal["chat", "run", "inbox"]
    """``chat``: a conversation (chat may write it); ``run`` and ``inbox``: written by the server only."""
    created_at: datetime
    """When it was created."""
    updated_at: datetime
    """When it last ran."""


class ThreadsOut(BaseModel):
    """``GET /v1/threads``."""

    threads: list[ThreadSummary]
    """The caller's threads, most recently active first."""


class DecidedApprovalOut(BaseModel):
    """An approval of the thread that is no longer pending: what was asked and what became of it."""

    approval_id: str
    request_id: str
    """The request it belonged to (several actions share one)."""
    tool: str
    action: str
    preview: str
    """What it would have done, as the approver saw it."""
    status: Literal["approved", "executing", "executed", "failed", "rejected", "expired", "superseded", "refused"]
    decision: Literal["approve", "edit", "reject"] | None
    """The owner's decision; ``None`` when it closed without one (expired, superseded, or ``refused``:
    closed by the server after too many invalid decisions)."""
    decided_via: str | None
    """The surface the decision came through (``chat``: the web page or the API; ``cli``, ``studio``)."""
    owner_id: str
    """Who decided: the thread's owner, the only one who may."""
    created_at: datetime
    decided_at: datetime | None
    error_code: str | None
    """Why it did not run, when it did not (``approval_expired``, ``edited``, ``deleted``...)."""


class ThreadDetail(BaseModel):
    """``GET /v1/threads/{id}``."""

    thread_id: str
    """The thread id."""
    title: str = ""
    """Its title: the first message, or the owner's name for it."""
    kind: Literal["chat", "run", "inbox"] = "chat"
    """``chat``: a conversation; ``run`` and ``inbox``: written by the server only."""
    status: ThreadStatus
    """Where the thread stands."""
    created_at: datetime
    """When it was created."""
    updated_at: datetime
    """When it last ran."""
    messages: list[MessageOut]
    """The most recent messages, oldest first."""
    pending_approval: ApprovalOut | None
    """The approval the thread waits on, if any."""
    approvals: list[DecidedApprovalOut] = Field(default_factory=list)
    """Its decided and closed approvals, newest first (the history a reload keeps)."""
    latest_turn_id: str | None
    """The latest turn streamed over HTTP (for ``GET /v1/threads/{id}/events``)."""
    latest_seq: int | None
    """The ``seq`` of the thread's last recorded event (in its turn)."""
    latest_event_id: int | None
    """The log id of the thread's last recorded event (a ``Last-Event-ID`` to follow from)."""


class HealthOut(BaseModel):
    """``GET /healthz`` and ``GET /readyz``."""

    status: Literal["ok", "ready"]
    """``ok``: the process serves; ``ready``: and its database answers."""


class AuditVerdictOut(BaseModel):
    """``GET /v1/admin/audit``: the audit log's hash chain, recomputed."""

    ok: bool
    """Whether every row checked out."""
    rows: int
    """Rows checked."""
    first_bad_seq: int | None = None
    """The first row that failed, if any."""
    problem: str = ""
    """What failed: ``gap``, ``prev_hash``, ``row_hash``, ``column:<name>`` or ``body``."""


_URL_PATTERN = r"^https?://[^\s\x00\ud800-\udfff]+$"
Username = Annotated[str, AfterValidator(stored), Field(
    min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$",
    json_schema_extra={"pattern": r"^[^\x00-\x1f\x7f\ud800-\udfff]+$"})]
Password = Annotated[str, AfterValidator(stored), Field(
    min_length=1, max_length=500, description="Stored encrypted; never returned.",
    json_schema_extra={"pattern": STORED_PATTERN})]


class CalDavAccountIn(_Wire):
    """Body of ``PUT /v1/me/accounts/caldav``: the calendar's address and its login."""

    url: Annotated[str, AfterValidator(stored), Field(
        max_length=500, pattern=r"^https?://[^\s]+$", json_schema_extra={"pattern": _URL_PATTERN},
        description="The calendar collection's address.")]
    username: Username
    password: Password


class ImapAccountIn(_Wire):
    """Body of ``PUT /v1/me/accounts/imap``: the mailbox, the outgoing server, the login and the owner's address."""

    imap_url: Annotated[str, AfterValidator(stored), Field(
        max_length=500, pattern=r"^imaps?://[^\s/]+/?$", json_schema_extra={"pattern": r"^imaps?://[^\s/\x00\ud800-\udfff]+/?$"},
        description="``imaps://host[:port]`` (or ``imap://`` for a host the operator allows plain text).")]
    smtp_url: Annotated[str, AfterValidator(stored), Field(
        max_length=500, pattern=r"^(smtps|smtp\+starttls|smtp)://[^\s/]+/?$",
        json_schema_extra={"pattern": r"^(smtps|smtp\+starttls|smtp)://[^\s/\x00\ud800-\udfff]+/?$"},
        description="``smtps://host[:465]``, ``smtp+starttls://host[:587]`` (or ``smtp://`` where allowed).")]
    username: Username
    password: Password
    address: Annotated[str, AfterValidator(stored), Field(
        max_length=320, pattern=r"^[^\s@<>]+@[^\s@<>]+$", description="The From of what is sent.",
        json_schema_extra={"pattern": r"^[^\s@<>\x00\ud800-\udfff]+@[^\s@<>\x00\ud800-\udfff]+$"})]


class AccountOut(BaseModel):
    """A connected account, without its password."""

    kind: Literal["caldav", "imap"]
    url: str
    """The calendar's address, or the IMAP server's."""
    username: str
    smtp_url: str | None = None
    """For ``imap``: the outgoing server."""
    address: str | None = None
    """For ``imap``: the owner's address."""


class AccountsOut(BaseModel):
    """``GET /v1/me/accounts``."""

    accounts: list[AccountOut]
