"""Turn state (checkpointed per thread) and run context (identity, never from the model)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage
from langgraph.graph.message import add_messages
from typing_extensions import NotRequired, TypedDict  # pydantic needs these on Python < 3.12

from tollgate.policies.errors import ErrorCode
from tollgate.policies.hitl import ApprovalRequest
from tollgate.policies.honesty import Outcome
from tollgate.policies.tiers import Tier
from tollgate.tools.registry import ActionResult, ResultRow

__all__ = [
    "LOCALE_TAG",
    "CallRecord",
    "CallStatus",
    "Channel",
    "Context",
    "Gate",
    "Pending",
    "PendingAction",
    "Plan",
    "RecentList",
    "TurnInput",
    "TurnOutput",
    "TurnState",
    "merge_known",
    "merge_recent",
    "outcome_of",
    "turn_messages",
]

Channel = Literal["chat", "studio", "background", "cli"]
_OWNER = re.compile(r"^[A-Za-z0-9_.@:-]{1,128}$")
LOCALE_TAG: Final = r"[A-Za-z]{2,3}(?:-[A-Za-z0-9]{2,8}){0,3}"
"""A language tag as owners' profiles store it (``en``, ``fr-FR``)."""
_LOCALE = re.compile(LOCALE_TAG)


@dataclass(frozen=True, slots=True)
class Context:
    """Run context: who the turn acts for. Set by the server, Studio's form or the scheduler."""

    owner_id: str
    """The owner whose data the turn may touch."""
    timezone: str = "UTC"
    """The owner's IANA timezone (relative dates, rendering)."""
    channel: Channel = "chat"
    """Where the turn came from."""
    locale: str | None = None
    """The owner's language tag (``en-GB``, ``fr``) from their profile, when known: how a numeric
    date such as 12/11 reads; ``None`` leaves such a date to a question."""

    def __post_init__(self) -> None:
        if not isinstance(self.owner_id, str) or not _OWNER.fullmatch(self.owner_id):
            raise ValueError("owner_id must be 1-128 characters of letters, digits and _.@:-")
        if self.locale is not None and not _LOCALE.fullmatch(self.locale):
            raise ValueError("locale must be a language tag such as en, fr-FR")
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown timezone {self.timezone!r}") from None


class Plan(TypedDict):
    """The tool call the picker chose, after strict decoding (ids not yet bound)."""

    call_id: str
    """The model's tool-call id (kept through edits)."""
    tool: str
    """Tool name."""
    action: str
    """Action name."""
    args: dict[str, Any]
    """Validated arguments as JSON values; after id validation, ids are bound store ids."""
    args_hash: NotRequired[str]
    """Hash of the final arguments: set by id validation once ids are bound, or by the gate for a
    call that carries no ids (it then goes straight to execute or propose)."""
    proposed_at: NotRequired[int]
    """Unix seconds when the approval was requested (fixes the token's expiry on re-execution)."""
    seal: NotRequired[str]
    """The gate's HMAC over this exact call (:func:`policies.approval.seal_plan`): execute runs
    nothing without it, so a plan written into the state from outside runs nothing."""
    verdict: NotRequired[Literal["execute", "propose"]]
    """The gate's verdict, for routing only: execute derives its own again."""
    approval_id: NotRequired[str]
    """Set once a person approved this call; execute still claims that approval for these
    exact arguments in the effect's transaction."""
    policy_rule: NotRequired[str]
    """The deployment's approval rule that lets this confirmation-tier call run unasked."""
    edited: NotRequired[bool]
    """Its arguments are a reviewer's edit (execute checks them for DLP findings as the model's)."""
    revision: NotRequired[int]
    """How many times a reviewer edited it for a new preview (each revision is a new approval)."""
    flow: NotRequired[dict[str, Any]]
    """Why the flow check sent this outbound read to approval: the ``sources`` it copies from, and
    whether it carries ``contacts`` (shown on the approval card)."""


CallStatus = Literal["ran", "refused", "clarify", "failed", "rejected", "expired", "repeated"]
"""What became of one tool call of the turn (``repeated``: a list already run this turn)."""


class CallRecord(TypedDict):
    """One tool call of the turn and what became of it: the turn's real effects."""

    call_id: str
    """The model's tool-call id."""
    tool: str
    """Tool name."""
    action: str
    """Action name."""
    status: CallStatus
    """What happened."""
    writes: bool
    """Whether the action changes something."""
    result: NotRequired[ActionResult]
    """Its result, when it ran."""
    message: NotRequired[str]
    """For a call that did not run: what to tell the person."""
    code: NotRequired[str]
    """For a call that did not run: the error code."""


class Gate(TypedDict):
    """The server's decision for this step."""

    verdict: Literal["execute", "propose", "refuse", "clarify", "reply"]
    """What happens next."""
    reason: str
    """Audit reason (short, no argument values)."""
    code: NotRequired[ErrorCode]
    """Error code for refusals and clarifications."""
    tier: NotRequired[Tier]
    """The tier that applied."""
    message: NotRequired[str]
    """Text for the user (a plain reply, a clarifying question or a refusal)."""


class PendingAction(TypedDict):
    """One action of the pending request."""

    approval_id: str
    """Its approval id (and its effect's idempotency key)."""
    call_id: str
    """The tool call it answers."""
    tool: str
    """Tool name."""
    action: str
    """Action name."""
    args_hash: str
    """Hash of the arguments it would run with."""
    preview: str
    """Server-rendered description of what it will do."""


class Pending(TypedDict):
    """The approval request this turn is waiting on (or just decided)."""

    approval_id: str
    """The request's id: its first action's approval id."""
    token: str
    """The signed request token."""
    expires_at: str
    """ISO 8601 expiry."""
    preview: str
    """Server-rendered description of what will run (every action's, numbered when several)."""
    args_hash: NotRequired[str]
    """The request's hash (:func:`nodes.propose.request_hash`) its token binds."""
    actions: NotRequired[list[PendingAction]]
    """Each action of the request, in order."""
    decision: NotRequired[Literal["approve", "edit", "reject", "expired", "invalid"]]
    """Set once decided."""
    message: NotRequired[str]
    """The reviewer's message on reject."""


class RecentList(TypedDict):
    """The latest list of one kind in this thread: the only ids a call may bind."""

    rows: list[ResultRow]
    """Rows in display order (position 1 first)."""
    turn_id: str
    """The turn that produced it."""
    listed_at: str
    """When it was listed (ISO 8601); the newest list is what "the 2nd one" refers to."""
    ambiguous: NotRequired[bool]
    """Set when one model answer listed this kind twice (two lists were shown at once): positions
    would be ambiguous, so only ids bind until the next list."""


def outcome_of(calls: list[CallRecord], *, waiting: bool = False) -> Outcome:
    """The turn's outcome from its calls: a write that ran wins, then a pending approval, then a read;
    otherwise what stopped the first call that did not run."""
    if any(c["status"] == "ran" and c["writes"] for c in calls):
        return "executed"
    if waiting:
        return "proposed"
    if any(c["status"] == "ran" for c in calls):
        return "read"
    for c in calls:
        if c["status"] in ("refused", "clarify", "failed", "rejected", "expired"):
            return c["status"]
    return "read" if calls else "reply"


def turn_messages(left: list[AnyMessage] | None, right: Any) -> list[AnyMessage]:
    """Messages of the current turn only: a new human message starts the list afresh.

    The conversation is kept in the ``transcript`` table, so a checkpoint does not grow with
    the thread and a turn costs the same on its 1,000th run as on its first.
    """
    incoming = right if isinstance(right, list) else [right]
    if all(isinstance(m, BaseMessage) and not isinstance(m, HumanMessage) for m in incoming):
        return add_messages(left or [], incoming)  # the common case: no new request in this write
    merged: list[AnyMessage] = add_messages([], incoming) if incoming else []
    starts = [i for i, m in enumerate(merged) if isinstance(m, HumanMessage)]
    if starts:
        return merged[starts[-1] :]
    return add_messages(left or [], merged)


def merge_recent(left: dict[str, RecentList] | None, right: dict[str, RecentList] | None) -> dict[str, RecentList]:
    """A new list of a kind replaces the old one; other kinds are kept."""
    out = dict(left or {})
    out.update(right or {})
    return out


KNOWN_IDS_PER_KIND: Final = 256
"""How many server-returned ids of one kind a thread keeps bindable (the newest)."""


def merge_known(left: dict[str, list[str]] | None, right: dict[str, list[str]] | None) -> dict[str, list[str]]:
    """Ids the server returned, per kind, oldest first: new ones are appended (an id seen again
    moves to the end) and only the newest :data:`KNOWN_IDS_PER_KIND` are kept."""
    out = dict(left or {})
    for kind, ids in (right or {}).items():
        fresh = set(ids)
        merged = [i for i in out.get(kind, []) if i not in fresh] + list(dict.fromkeys(ids))
        out[kind] = merged[-KNOWN_IDS_PER_KIND:]
    return out


class TurnInput(TypedDict):
    """What starts a turn: the user's message."""

    messages: Annotated[list[AnyMessage], turn_messages]
    """The new human message (earlier turns live in the transcript table)."""


class TurnOutput(TypedDict):
    """What a finished turn returns."""

    messages: Annotated[list[AnyMessage], turn_messages]
    """This turn's messages, ending with the reply."""
    reply: NotRequired[str]
    """The reply text."""
    outcome: NotRequired[Outcome]
    """What really happened."""


class TurnState(TypedDict):
    """The checkpointed state of a thread between and within turns."""

    messages: Annotated[list[AnyMessage], turn_messages]
    """This turn's messages: the request, tool calls and results, the reply."""
    turn_id: NotRequired[str]
    """Id of the current turn (new for each human message)."""
    seq: NotRequired[int]
    """Sequence number of the last event emitted in this turn."""
    plans: NotRequired[list[Plan]]
    """The current step's calls still to run or decide (private: never an input)."""
    gate: NotRequired[Gate | None]
    """The server's decision for the current step (private)."""
    pending: NotRequired[Pending | None]
    """The approval this turn waits on (private)."""
    calls: NotRequired[list[CallRecord]]
    """Every tool call of this turn and what became of it (private)."""
    outbound: NotRequired[list[str]]
    """The strings this turn's outbound reads sent (the flow check judges the next with them)."""
    sent_out: NotRequired[list[str]]
    """The strings this thread's latest outbound reads sent, across turns, the last 32 (DLP judges
    the next one joined with them: a secret split over turns is still one secret)."""
    trace_link: NotRequired[str]
    """The W3C ``traceparent`` of the run that asked for the pending approval, when traces are
    exported: the run that resumes it is linked to that one (:mod:`graph.observe.tracing`)."""
    outcome: NotRequired[Outcome]
    """What really happened, for the honesty gate."""
    reply: NotRequired[str]
    """The final reply text."""
    steps: NotRequired[int]
    """Model answers with tool calls in this turn (the step budget counts them)."""
    lists_run: NotRequired[list[str]]
    """List actions already run in this turn (each runs at most once)."""
    approval_request: NotRequired[ApprovalRequest | None]
    """The interrupt payload built by propose (private)."""
    usage: NotRequired[list[dict[str, Any]]]
    """Model usage of this turn (provider, model, tokens), written to the ledger at the end."""
    superseded: NotRequired[str | None]
    """Preview of an approval a new message superseded, to mention in the reply."""
    fell_back: NotRequired[bool]
    """Whether the offline picker answered for a configured model that failed (said in the reply)."""
    recent: Annotated[dict[str, RecentList], merge_recent]
    """Latest list per kind (what a position means), written only by execute from the tools' own results."""
    known: Annotated[dict[str, list[str]], merge_known]
    """Every id per kind the tools returned in this thread (lists, item reads, writes), bounded:
    the ids a call may bind. Written only by execute."""
