"""Human-in-the-loop wire types, in LangChain's HITL request/response shape.

The interrupt payload is an :class:`ApprovalRequest`: ``action_requests`` and
``review_configs`` as LangChain agent UIs and LangGraph Studio render them, plus Tollgate's
``approval`` block (id, token, args_hash, expiry). The resume value is an
:class:`ApprovalResume`: the token and exactly one decision, discriminated by ``type``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from policies.arguments import SafeText
from policies.errors import ApprovalInvalid

__all__ = [
    "ActionRequest",
    "ApprovalBlock",
    "ApprovalRequest",
    "ApprovalResume",
    "ApproveDecision",
    "Decision",
    "DecisionType",
    "EditDecision",
    "EditedAction",
    "RejectDecision",
    "ReviewConfig",
    "parse_resume",
]

DecisionType = Literal["approve", "edit", "reject"]


class ActionRequest(TypedDict):
    """One action awaiting review."""

    name: str
    """The function name (``tool__action``)."""
    args: dict[str, Any]
    """The exact, bound arguments that will run if approved."""
    description: str
    """The server-rendered preview."""


class ReviewConfig(TypedDict):
    """Which decisions a reviewer may take for an action."""

    action_name: str
    """The function name this applies to."""
    allowed_decisions: list[DecisionType]
    """The allowed decision types."""


class ApprovalBlock(TypedDict):
    """Tollgate's binding of the request to a signed token."""

    id: str
    """The approval id (its nonce)."""
    token: str
    """The signed token a resume must present."""
    args_hash: str
    """SHA-256 of the canonical JSON of ``args``."""
    expires_at: str
    """ISO 8601 expiry; after it the request resolves as rejected."""
    tool: str
    """Tool name."""
    action: str
    """Action name."""


class ApprovalRequest(TypedDict):
    """The interrupt payload: one request per turn listing every pending action."""

    action_requests: list[ActionRequest]
    """The actions awaiting review (Tollgate proposes one per turn)."""
    review_configs: list[ReviewConfig]
    """Allowed decisions per action."""
    approval: ApprovalBlock
    """Token binding."""


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
    """Run the action with edited arguments."""

    type: Literal["edit"]
    edited_action: EditedAction


class RejectDecision(_Strict):
    """Do not run it; optionally say why."""

    type: Literal["reject"]
    message: SafeText(500, min_length=0) | None = None


Decision = Annotated[ApproveDecision | EditDecision | RejectDecision, Field(discriminator="type")]


class ApprovalResume(_Strict):
    """The value a resume must carry."""

    token: Annotated[str, Field(min_length=1, max_length=2048)]
    decisions: Annotated[list[Decision], Field(min_length=1, max_length=1)]


def parse_resume(value: object) -> ApprovalResume:
    """Decode a resume value; anything else is refused with :class:`ApprovalInvalid`."""
    try:
        return ApprovalResume.model_validate(value, strict=False)
    except ValidationError as exc:
        kinds = sorted({str(e.get("type")) for e in exc.errors(include_input=False)})
        raise ApprovalInvalid(f"malformed resume value ({', '.join(kinds)[:120]})") from None
