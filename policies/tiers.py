"""Tiers: what may run, and how, decided from the server's own map.

``allowlist`` runs at once (reads, and the few reversible writes we allow without
approval), ``confirmation`` becomes an approval request, ``mustlist`` is operator-only and
refused in chat, ``blocklist`` is refused always. An action missing from the map is
unclassified and refused; an action whose name says it destroys client data is blocklisted
whatever the map says, so a mis-registration cannot turn a hard delete into a write.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["Tier", "TierVerdict", "classify_tier", "is_hard_delete"]

Tier = Literal["allowlist", "confirmation", "mustlist", "blocklist"]
"""The closed set of tiers."""

_HARD_DELETE: Final = re.compile(r"(^|_)(delete|destroy|purge|erase|wipe|drop|hard_delete|expunge)($|_)")


def is_hard_delete(action: str) -> bool:
    """Whether an action name reads as a hard delete of client data."""
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


def classify_tier(tool: str, action: str, tier_map: Mapping[tuple[str, str], Tier]) -> TierVerdict:
    """Classify (tool, action) against the server's explicit map. Fail closed."""
    if is_hard_delete(action):
        return TierVerdict.refuse("blocklist", "hard_delete")
    tier = tier_map.get((tool, action))
    if tier is None:
        return TierVerdict.refuse("blocklist", "unclassified")
    if tier == "allowlist":
        return TierVerdict(tier, "execute", "mapped")
    if tier == "confirmation":
        return TierVerdict(tier, "propose", "mapped")
    if tier == "mustlist":
        return TierVerdict.refuse(tier, "operator_only")
    return TierVerdict.refuse(tier, "blocklisted")
