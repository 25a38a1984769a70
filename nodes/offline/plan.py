"""What the offline picker decides, and the turn it decides about."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tollgate.nodes.offline.functions import ActionKey
from tollgate.nodes.offline.refs import Row
from tollgate.nodes.offline.text import normalize
from tollgate.nodes.offline.times import When, find_when

__all__ = ["Call", "Direct", "Plan", "Reply", "Turn", "clarify", "reply"]


@dataclass(frozen=True, slots=True)
class Call:
    """Call the function serving ``key`` with ``args``."""

    key: ActionKey
    """The canonical ``(tool, action)``."""
    args: dict[str, Any]
    """JSON arguments, valid for the action's argument model."""


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer in plain text, no tool call."""

    text: str
    """The reply."""
    outcome: Literal["reply", "clarify"] = "clarify"
    """A plain answer, or a question back to the user."""


@dataclass(frozen=True, slots=True)
class Direct:
    """Call a bound function the grammar does not know (a plug-in's, the web's) by its name."""

    function: str
    """The bound function's name."""
    args: dict[str, Any]
    """JSON arguments, filled from its parameters schema (the server validates them)."""


Plan = Call | Direct | Reply
"""The decision for one request."""


def clarify(text: str) -> Reply:
    """A clarifying question."""
    return Reply(text, "clarify")


def reply(text: str) -> Reply:
    """A plain answer."""
    return Reply(text, "reply")


@dataclass(frozen=True, slots=True)
class Turn:
    """The request being decided, with the context the server fenced into the prompt."""

    raw: str
    """The request exactly as the user wrote it."""
    text: str
    """The normalised request (typos repaired, politeness stripped; casing kept)."""
    now: datetime | None
    """The current time in the owner's timezone (``None`` without a context)."""
    tz: tzinfo | None
    """The owner's timezone (a fixed offset when the context named no valid IANA zone)."""
    recent: Mapping[str, Sequence[Row]] = field(default_factory=dict)
    """The latest list per kind."""
    latest_kind: str | None = None
    """Which kind was listed last."""
    prior: tuple[str, ...] = ()
    """Earlier user requests in the thread, oldest first."""
    capabilities: str = ""
    """The capability summary."""
    day_first: bool | None = None
    """How the owner's locale reads 12/11: day first (en-GB, fr), month first (en-US), or not known."""

    def when(self, text: str) -> When | None:
        """The time phrase of ``text`` for this turn's clock, zone and locale (``None`` without a clock)."""
        if self.now is None or self.tz is None:
            return None
        return find_when(text, self.now, self.tz, day_first=self.day_first)

    @classmethod
    def of(cls, request: str, context: Mapping[str, Any] | None) -> Turn:
        """Build a turn from the request and the fenced context (tolerating missing keys)."""
        ctx = context or {}
        tz: tzinfo | None = None
        try:
            tz = ZoneInfo(str(ctx["timezone"])) if ctx.get("timezone") else None
        except (ZoneInfoNotFoundError, ValueError):
            tz = None
        now: datetime | None = None
        try:
            parsed = datetime.fromisoformat(str(ctx["now"])) if ctx.get("now") else None
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            tz = tz or parsed.tzinfo  # no IANA zone: keep the fixed offset of ``now``
            now = parsed.astimezone(tz)
        recent_raw = ctx.get("recent")
        recent: dict[str, list[Row]] = {}
        if isinstance(recent_raw, Mapping):
            for kind, rows in recent_raw.items():
                if isinstance(rows, list):
                    good = [r for r in rows if isinstance(r, Mapping) and "id" in r and "position" in r]
                    recent[str(kind)] = sorted(good, key=lambda r: int(r.get("position", 0)))
        prior_raw = ctx.get("prior_user_turns")
        prior = tuple(str(p) for p in prior_raw) if isinstance(prior_raw, list) else ()
        latest = ctx.get("latest_kind")
        return cls(
            raw=request,
            text=normalize(request),
            now=now,
            tz=tz,
            recent=recent,
            latest_kind=str(latest) if latest else None,
            prior=prior,
            capabilities=str(ctx.get("capabilities") or ""),
            day_first=_day_first(ctx.get("locale")),
        )


def _day_first(locale: object) -> bool | None:
    """Whether ``locale`` writes the day before the month in numeric dates; ``None`` when unsure."""
    if not isinstance(locale, str) or not locale:
        return None
    language, _, region = locale.replace("_", "-").partition("-")
    if language.lower() == "en" and not region:
        return None  # English alone: American or British, the owner did not say
    return not (language.lower() == "en" and region.upper() in {"US", "PH", "CA"})
