"""Human-in-the-loop wire types, in LangChain's HITL request/response shape.

The interrupt payload is an :class:`ApprovalRequest`: ``action_requests`` and
``review_configs`` as LangChain agent UIs and LangGraph Studio render them, plus Tollgate's
``approval`` block (the request's id, token and expiry, and each action's own binding). The
resume value is an :class:`ApprovalResume`: the request's token and one decision per action,
in the order of ``action_requests``, each discriminated by ``type``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from typing_extensions import NotRequired, TypedDict  # pydantic needs it on Python < 3.12

from tollgate.policies.arguments import SafeText
from tollgate.policies.errors import ApprovalInvalid

__all__ = [
    "ActionRequest",
    "ActionBinding",
    "ApprovalBlock",
    "ApprovalRequest",
    "ApprovalResume",
    "ApproveDecision",
    "CardWarning",
    "Decision",
    "DecisionType",
    "EditDecision",
    "EditedAction",
    "MAX_ACTIONS",
    "ProvenanceMatch",
    "RefusedResume",
    "RejectDecision",
    "ReviewConfig",
    "WarningCode",
    "decision_kind",
    "joined_preview",
    "parse_resume",
]

DecisionType = Literal["approve", "edit", "reject"]

MAX_ACTIONS: Final = 8
"""Actions one request (one model answer) may list; further calls of the answer are refused."""


WarningCode = Literal["not_requested", "third_party_value", "instructions", "unknown_source", "named_content",
                      "read_content", "outbound", "dlp", "destructive"]
"""What a card's warning is about (see :mod:`nodes.card`; ``outbound`` and ``dlp`` come from the
flow check and the DLP scan; ``destructive`` marks an action the deployment lets the owner approve
although it cannot be undone)."""


class CardWarning(TypedDict):
    """One warning or note of an approval card, as shown above its preview."""

    code: WarningCode
    """What it is about, for clients that act on it."""
    text: str
    """The sentence shown (``⚠`` for a warning, ``ⓘ`` for a note)."""


class ProvenanceMatch(TypedDict):
    """One token of an argument found in what the thread read."""

    token: str
    """The token as traced (``iban:DE89…``, ``@billing@acme.example``, a word, a span)."""
    source: str
    """The source as the card names it (``mail “Invoice 42” from billing@acme.example (mail.read)``)."""
    call: str
    """The call that returned it (``mail.read``)."""
    trust: Literal["owner", "third_party"]
    """The owner's own data, or someone else's content."""
    snippet: str
    """A short quote of the text around it."""
    instructions: bool
    """The text around it reads as instructions to an assistant."""


class ActionRequest(TypedDict):
    """One action awaiting review."""

    name: str
    """The function name (``tool__action``)."""
    args: dict[str, Any]
    """The exact, bound arguments that will run if approved."""
    description: str
    """The server-rendered preview."""
    provenance: NotRequired[dict[str, str]]
    """Where each argument's value came from ("typed by you", "from someone else's content: mail
    “Re: invoice” from x@y.example (mail.read): “…”", "chosen by the model", "unknown source…")."""
    provenance_detail: NotRequired[dict[str, list[ProvenanceMatch]]]
    """Per argument, the tokens traced to what the thread read, with their sources."""
    warnings: NotRequired[list[CardWarning]]
    """The card's warnings and notes (also at the top of ``description``)."""


class ReviewConfig(TypedDict):
    """Which decisions a reviewer may take for an action."""

    action_name: str
    """The function name this applies to."""
    allowed_decisions: list[DecisionType]
    """The allowed decision types."""


class ActionBinding(TypedDict):
    """One action's own binding: its approval row, arguments hash and token."""

    id: str
    """The action's approval id (its nonce, and its effect's idempotency key)."""
    call_id: str
    """The model's tool-call id it answers."""
    tool: str
    """Tool name."""
    action: str
    """Action name."""
    args_hash: str
    """SHA-256 of the canonical JSON of its ``args``."""
    token: str
    """A signed token bound to this action alone."""


class ApprovalBlock(TypedDict):
    """Tollgate's binding of the request to a signed token."""

    id: str
    """The request id: the first action's approval id."""
    token: str
    """The signed token a resume must present (bound to every action's hash, in order)."""
    args_hash: str
    """The request's hash: the action's ``args_hash`` for one action, else a hash over all of them."""
    expires_at: str
    """ISO 8601 expiry; after it the request resolves as rejected."""
    tool: str
    """The first action's tool."""
    action: str
    """The first action's action."""
    actions: NotRequired[list[ActionBinding]]
    """Every action's binding, in the order of ``action_requests``."""


class RefusedResume(TypedDict):
    """Why the last resume of a request was refused (on the request asked again)."""

    code: str
    """The error code (``approval_invalid``, ``invalid_args``, ``off_list_id``...)."""
    message: str
    """What was wrong, for the person."""
    attempts_left: int
    """Resumes the request still takes; when every one of them is refused too, the server closes
    it (``refused``: nobody decided, nothing ran)."""


class ApprovalRequest(TypedDict):
    """The interrupt payload: one request per turn listing every pending action."""

    action_requests: list[ActionRequest]
    """The actions awaiting review, in the order the model called them."""
    review_configs: list[ReviewConfig]
    """Allowed decisions per action."""
    approval: ApprovalBlock
    """Token binding."""
    request: NotRequired[str]
    """The person's request that began the turn (the card shows "You asked: …")."""
    refused: NotRequired[RefusedResume]
    """Set when the request is asked again after a refused resume: why it was refused."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class ApproveDecision(_Strict):
    """Run the action as proposed."""

    type: Literal["approve"]


class EditedAction(_Strict):
    """The edited call: same function, new arguments (checked again before running)."""

    name: Annotated[str, Field(max_length=128)]
    args: dict[str, Any]


class EditDecision(_Strict):
    """Change the action's arguments: shown again as a new preview, or run at once with ``run``."""

    type: Literal["edit"]
    edited_action: EditedAction
    run: bool = False
    """Run the edited call without reviewing its new preview (the client asks for edit-and-run)."""


class RejectDecision(_Strict):
    """Do not run it; optionally say why."""

    type: Literal["reject"]
    message: SafeText(500, min_length=0) | None = None


Decision = Annotated[ApproveDecision | EditDecision | RejectDecision, Field(discriminator="type")]


class ApprovalResume(_Strict):
    """The value a resume must carry."""

    token: Annotated[str, Field(min_length=1, max_length=2048)]
    decisions: Annotated[list[Decision], Field(min_length=1, max_length=MAX_ACTIONS)]


def parse_resume(value: object) -> ApprovalResume:
    """Decode a resume value; anything else is refused with :class:`ApprovalInvalid`."""
    try:
        return ApprovalResume.model_validate(value, strict=False)
    except ValidationError as exc:
        kinds = sorted({str(e.get("type")) for e in exc.errors(include_input=False)})
        raise ApprovalInvalid(f"malformed resume value ({', '.join(kinds)[:120]})") from None


def decision_kind(kinds: list[str]) -> str:
    """One word for a request's decisions: the kind when every action got the same one, else ``mixed``."""
    distinct = set(kinds)
    return kinds[0] if len(distinct) == 1 else "mixed"


def joined_preview(previews: Sequence[str]) -> str:
    """One text for several previews (numbered when there are several)."""
    if len(previews) == 1:
        return previews[0]
    return "\n\n".join(f"{i}. {p}" for i, p in enumerate(previews, 1))
