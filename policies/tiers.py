"""Tiers: what may run, and how, decided from the server's own map.

``allowlist`` runs at once (reads, and the few reversible writes we allow without
approval), ``confirmation`` becomes an approval request, ``mustlist`` is operator-only and
refused in chat, ``blocklist`` is refused always. An action missing from the map is
unclassified and refused. An action that *declares* the ``destructive`` effect (it destroys
client data beyond recovery) is refused whatever its tier: the guard follows the declaration,
never the name. Names only serve the registry's start-up check (:func:`looks_destructive`),
which refuses a registry whose destructive-sounding names declare a milder effect unless the
author acknowledged it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["Effect", "Tier", "TierVerdict", "classify_tier", "looks_destructive"]

Tier = Literal["allowlist", "confirmation", "mustlist", "blocklist"]
"""The closed set of tiers."""

Effect = Literal["read", "write", "destructive"]
"""What an action does to data: reads it, changes it reversibly (or sends on the owner's
behalf), or destroys it beyond recovery."""

_HARD_DELETE: Final = re.compile(r"(^|_)(delete|destroy|purge|erase|wipe|drop|hard_delete|expunge)($|_)")


def looks_destructive(action: str) -> bool:
    """Whether an action name reads as a hard delete (a start-up check of declarations, never a verdict)."""
    return bool(_HARD_DELETE.search(action.lower()))


@dataclass(frozen=True, slots=True)
class TierVerdict:
    """The gate's decision for one (tool, action)."""

    tier: Tier
    """The tier that applies."""
    run: Literal["execute", "propose", "refuse"]
    """What the turn does next."""
    reason: str
    """A short audit reason (``mapped``, ``unclassified``, ``hard_delete``...)."""

    @classmethod
    def refuse(cls, tier: Tier, reason: str) -> TierVerdict:
        """A refusal."""
        return cls(tier, "refuse", reason)


def classify_tier(
    tool: str, action: str, tier_map: Mapping[tuple[str, str], Tier], effect: Effect | None,
    approvable_destructive: Collection[tuple[str, str]] = (),
) -> TierVerdict:
    """Classify (tool, action) against the server's explicit map and its declared ``effect``. Fail closed.

    ``effect`` is the registry's declaration (``None`` for an action the registry does not
    know, which is refused as unclassified). A destructive action is refused, unless the
    deployment's policy names it in ``approvable_destructive`` *and* its tier is ``confirmation``:
    then it is proposed, and runs only with the owner's approval (never without one).
    """
    if effect == "destructive":
        if (tool, action) in approvable_destructive and tier_map.get((tool, action)) == "confirmation":
            return TierVerdict("confirmation", "propose", "destructive_opted_in")
        return TierVerdict.refuse("blocklist", "hard_delete")
    tier = tier_map.get((tool, action))
    if tier is None or effect is None:
        return TierVerdict.refuse("blocklist", "unclassified")
    if tier == "allowlist":
        return TierVerdict(tier, "execute", "mapped")
    if tier == "confirmation":
        return TierVerdict(tier, "propose", "mapped")
    if tier == "mustlist":
        return TierVerdict.refuse(tier, "operator_only")
    return TierVerdict.refuse(tier, "blocklisted")
