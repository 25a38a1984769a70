"""Per-action approval policy as data: which decisions a reviewer may take, and when a
confirmation-tier write may run without asking.

Rules come from the deployment's configuration (a TOML file, ``TOLLGATE_APPROVAL_RULES``),
never from the model: they are evaluated on the gate's validated arguments and can only
*narrow* what needs asking for confirmation-tier calls the gate would propose anyway. A call
the gate refuses, or sends to approval because DLP found something, is never run unasked.
Without rules, every confirmation-tier call asks, with approve, edit and reject allowed.

::

    [[rule]]
    name = "mail to myself"
    action = "mail.send"          # tool.action
    owners = ["alice"]            # optional: only these owners (default: every owner)
    run_unasked = true            # run without asking when every condition holds
    when = [{ field = "to", one_of = ["alice@example.com"] }]

    [[rule]]
    name = "no edits of payments"
    action = "payments.transfer"
    decisions = ["approve", "reject"]
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tollgate.policies.hitl import DecisionType

__all__ = ["ALL_DECISIONS", "ApprovalRules", "Condition", "Rule", "RulesError", "parse_rules"]

ALL_DECISIONS: Final[tuple[DecisionType, ...]] = ("approve", "edit", "reject")


class RulesError(ValueError):
    """The approval rules file is unreadable or invalid (the server refuses to start)."""


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Condition(_Strict):
    """One condition on an argument; a list argument holds only if every element does."""

    field: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    """The argument's name."""
    equals: str | int | float | bool | None = None
    """The value must be this (strings compare case-insensitively)."""
    one_of: list[str | int | float] | None = None
    """The value must be one of these (strings compare case-insensitively)."""
    at_most: float | None = None
    """A number no greater than this."""

    @model_validator(mode="after")
    def _one_test(self) -> Condition:
        given = [t for t in (self.equals, self.one_of, self.at_most) if t is not None]
        if len(given) != 1:
            raise ValueError("a condition needs exactly one of equals, one_of, at_most")
        return self

    def holds(self, args: Mapping[str, Any]) -> bool:
        """Whether the condition holds for ``args`` (a missing argument never holds)."""
        if self.field not in args:
            return False
        value = args[self.field]
        values = value if isinstance(value, list) else [value]
        return bool(values) and all(self._one(v) for v in values)

    def _one(self, value: Any) -> bool:
        if self.at_most is not None:
            return isinstance(value, (int, float)) and not isinstance(value, bool) and value <= self.at_most
        wanted = [self.equals] if self.one_of is None else self.one_of
        return any(_same(value, w) for w in wanted)


def _same(value: Any, wanted: Any) -> bool:
    if isinstance(value, str) and isinstance(wanted, str):
        return value.casefold() == wanted.casefold()
    return type(value) is type(wanted) and value == wanted


class Rule(_Strict):
    """One rule for one action."""

    name: Annotated[str, Field(min_length=1, max_length=80)]
    """Shown in the audit log when the rule lets a call run unasked."""
    action: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")]
    """``tool.action``."""
    owners: list[Annotated[str, Field(min_length=1, max_length=128)]] | None = None
    """The owners it applies to (every owner when absent)."""
    run_unasked: bool = False
    """Run without asking when every condition of ``when`` holds."""
    when: list[Condition] = Field(default_factory=list)
    """Conditions for ``run_unasked`` (all must hold; none means always)."""
    decisions: list[DecisionType] | None = None
    """The decisions a reviewer may take for this action (default: all three)."""

    @model_validator(mode="after")
    def _sensible(self) -> Rule:
        if self.when and not self.run_unasked:
            raise ValueError("conditions (when) only apply to run_unasked rules")
        if self.decisions is not None and (not self.decisions or "reject" not in self.decisions):
            raise ValueError("decisions must allow reject")
        if not self.run_unasked and self.decisions is None:
            raise ValueError("a rule needs run_unasked or decisions")
        return self

    def applies(self, owner_id: str, tool: str, action: str) -> bool:
        """Whether the rule is about this owner's ``tool.action``."""
        return self.action == f"{tool}.{action}" and (self.owners is None or owner_id in self.owners)


class ApprovalRules(_Strict):
    """The deployment's rules (empty: today's behaviour, every confirmation-tier call asks)."""

    rule: list[Rule] = Field(default_factory=list)

    def runs_unasked(self, owner_id: str, tool: str, action: str, args: Mapping[str, Any]) -> str | None:
        """The name of the first rule that lets this call run without asking, or ``None``."""
        for rule in self.rule:
            if rule.run_unasked and rule.applies(owner_id, tool, action) and all(c.holds(args) for c in rule.when):
                return rule.name
        return None

    def allowed_decisions(self, owner_id: str, tool: str, action: str) -> list[DecisionType]:
        """The decisions a reviewer may take (the narrowest set any applying rule allows)."""
        allowed = list(ALL_DECISIONS)
        for rule in self.rule:
            if rule.decisions is not None and rule.applies(owner_id, tool, action):
                allowed = [d for d in allowed if d in rule.decisions]
        return allowed

    def unknown_actions(self, known: Iterable[str]) -> list[str]:
        """Actions the rules name that ``known`` (``tool.action`` names) does not have."""
        names = set(known)
        return sorted({r.action for r in self.rule if r.action not in names})


def parse_rules(text: str, source: str) -> ApprovalRules:
    """Parse the rules file's ``text``; raises :class:`RulesError` naming ``source`` and what is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(f"approval rules {source}: not valid TOML ({exc})") from None
    try:
        return ApprovalRules.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_input=False)[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise RulesError(f"approval rules {source}: {where}: {first.get('msg')}") from None
