"""Governance: one decision per tool call, from the server's own facts.

:func:`govern` derives everything from (tool, action) and the registry's metadata — never
from the model: tier → closed-schema decoding and clamping → egress policy for URL arguments →
DLP over every string argument → a :class:`GovernanceDecision`. A DLP finding blocks a read
(its values would leave the gate) and turns a write into an approval whose preview carries a
warning; a scanner failure counts as a finding. In ``shadow`` mode the DLP outcome is only
recorded (``shadow`` says what ``enforce`` would have done); tiers, schemas and network safety
are enforced in both modes. Every decision carries codes for the audit log, never values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from tollgate.policies.approval import args_hash, raw_args_hash
from tollgate.policies.arguments import validate_args
from tollgate.policies.dlp import DEFAULT_DLP, DlpPolicy, DlpReport, scan_values
from tollgate.policies.egress import EgressPolicy, UrlField, check_url
from tollgate.policies.errors import ErrorCode
from tollgate.policies.tiers import Effect, Tier, classify_tier

__all__ = [
    "ActionFacts",
    "GovernanceDecision",
    "GovernanceMode",
    "GovernancePolicy",
    "Verdict",
    "govern",
    "url_fields",
]

GovernanceMode = Literal["shadow", "enforce"]
"""``enforce`` acts on DLP findings; ``shadow`` only records them."""

Verdict = Literal["execute", "propose", "refuse", "clarify"]
"""What the turn does with the call."""


@dataclass(frozen=True, slots=True)
class GovernancePolicy:
    """The configured policy (built once from settings by the caller)."""

    mode: GovernanceMode = "enforce"
    """Whether DLP findings are acted on or only recorded."""
    egress: EgressPolicy = field(default_factory=EgressPolicy)
    """Where URL arguments may point (deny by default)."""
    dlp: DlpPolicy = DEFAULT_DLP
    """Scan limits and detectors."""
    approvable_destructive: frozenset[tuple[str, str]] = frozenset()
    """Destructive (tool, action) pairs the deployment explicitly lets the owner approve (none by default)."""

    def __post_init__(self) -> None:
        if self.mode not in ("shadow", "enforce"):
            raise ValueError(f"governance mode must be shadow or enforce, not {self.mode!r}")


@dataclass(frozen=True, slots=True)
class ActionFacts:
    """What governance knows about an action, from the registry (policy metadata, never model output)."""

    args_model: type[BaseModel]
    """The closed argument model."""
    effect: Effect
    """The declared effect (``write`` and ``destructive`` change data or send on the owner's behalf)."""

    @property
    def writes(self) -> bool:
        """Whether the action changes data or sends something (a DLP finding then asks instead of refusing)."""
        return self.effect != "read"


@dataclass(frozen=True, slots=True)
class GovernanceDecision:
    """The decision for one call, with its audit facts."""

    verdict: Verdict
    """Run now, ask for approval, refuse, or ask the user to clarify."""
    reason: str
    """Reason code (``mapped``, ``operator_only``, ``dlp_finding``, ``not_allowlisted``...)."""
    tier: Tier
    """The tier from the server's map."""
    mode: GovernanceMode = "enforce"
    """The mode the decision was taken in."""
    code: ErrorCode | None = None
    """Error code of a refusal or clarification."""
    args: dict[str, Any] | None = None
    """The decoded, clamped arguments (JSON values) when decoding succeeded."""
    args_hash: str = ""
    """SHA-256 of the canonical arguments (of the raw input when decoding failed)."""
    dlp: tuple[str, ...] = ()
    """DLP kinds found (failures included)."""
    dlp_fields: tuple[str, ...] = ()
    """Argument fields with findings."""
    warning: str = ""
    """The DLP warning for an approval preview (kinds and fields, never values)."""
    shadow: tuple[str, ...] = ()
    """What enforce mode would have done differently (``dlp_block``, ``dlp_approval``, ``not_allowlisted``)."""
    violations: tuple[str, ...] = ()
    """Schema violations (field and rule, never the value)."""

    @classmethod
    def refuse(cls, tier: Tier, reason: str, code: ErrorCode, **facts: Any) -> GovernanceDecision:
        """A refusal."""
        return cls("refuse", reason, tier, code=code, **facts)

    @classmethod
    def clarify(cls, tier: Tier, reason: str, code: ErrorCode, **facts: Any) -> GovernanceDecision:
        """Ask the user instead of acting."""
        return cls("clarify", reason, tier, code=code, **facts)

    def audit_detail(self) -> dict[str, str | int | bool | list[str]]:
        """Kinds, counts and flags for the audit record."""
        detail: dict[str, str | int | bool | list[str]] = {"tier": self.tier}
        if self.dlp:
            detail["dlp"] = list(self.dlp)
            detail["dlp_fields"] = list(self.dlp_fields)
        if self.shadow:
            detail["shadow"] = list(self.shadow)
        if self.violations:
            detail["violations"] = len(self.violations)
        return detail


def url_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """Argument fields marked :class:`~policies.egress.UrlField` (destinations Tollgate connects to)."""
    return tuple(
        name for name, info in model.model_fields.items() if any(isinstance(m, UrlField) for m in info.metadata)
    )


def govern(
    tool: str,
    action: str,
    raw_args: object,
    facts: ActionFacts | None,
    tier_map: Mapping[tuple[str, str], Tier],
    policy: GovernancePolicy,
) -> GovernanceDecision:
    """Decide one call: tier, then schema, then egress, then DLP. Fail closed at every step."""
    mode = policy.mode
    if facts is None:
        return GovernanceDecision.refuse("blocklist", "unknown_action", "permission_denied", mode=mode)
    tier = classify_tier(tool, action, tier_map, facts.effect, policy.approvable_destructive)
    if tier.run == "refuse":
        return GovernanceDecision.refuse(tier.tier, tier.reason, "permission_denied", mode=mode, args_hash=raw_args_hash(raw_args))
    checked = validate_args(facts.args_model, raw_args)
    if checked.value is None:
        return GovernanceDecision.clarify(
            tier.tier, "invalid_args", "invalid_args", mode=mode, violations=checked.violations, args_hash=raw_args_hash(raw_args)
        )
    args = checked.value.model_dump(mode="json", exclude_none=True)
    digest = args_hash(args)
    shadow: list[str] = []
    for name in url_fields(facts.args_model):
        value = args.get(name)
        if value is None:
            continue
        egress = check_url(str(value), policy.egress)
        if not egress.allowed:
            return GovernanceDecision.refuse(
                tier.tier, egress.reason, "egress_denied", mode=mode, args=args, args_hash=digest
            )
        shadow.extend(egress.shadow)
    report: DlpReport = scan_values(args, policy.dlp)
    found = {"dlp": report.kinds, "dlp_fields": report.fields, "args": args, "args_hash": digest, "mode": mode}
    verdict: Verdict = tier.run
    reason = tier.reason
    if not report.clean:
        wanted: Verdict = "propose" if facts.writes else "refuse"
        if mode == "shadow":
            shadow.append("dlp_approval" if wanted == "propose" else "dlp_block")
        elif wanted == "refuse":
            return GovernanceDecision.refuse(tier.tier, "dlp_finding", "egress_denied", shadow=tuple(shadow), **found)
        else:
            verdict, reason = "propose", "dlp_finding"
    warning = report.warning() if verdict == "propose" else ""
    return GovernanceDecision(verdict, reason, tier.tier, warning=warning, shadow=tuple(shadow), **found)
