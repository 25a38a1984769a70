"""A per-principal token bucket, kept in memory by each server process.

Keyed on the authenticated owner, never on client-supplied headers (``X-Forwarded-For`` and
friends are trivially forged). Each process keeps its own buckets, so N processes allow up
to N times the rate: enough to stop a runaway client, not a quota system.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RateLimiter", "Refused"]

_PRUNE_EVERY = 1024


@dataclass
class _Bucket:
    tokens: float
    stamp: float
    refusing: bool = False
    """Whether the last request was refused (a run of refusals is audited once, at its start)."""


@dataclass(frozen=True, slots=True)
class Refused:
    """A refused request: when one will be allowed, and whether it starts a run of refusals."""

    retry_after: float
    """Seconds until a request is allowed."""
    first: bool
    """The first refusal since a request was last allowed."""


class RateLimiter:
    """``burst`` requests at once, refilled at ``per_minute`` per minute, per key."""

    def __init__(self, burst: int, per_minute: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if burst < 1 or per_minute < 1:
            raise ValueError("burst and per_minute must be at least 1")
        self.burst = float(burst)
        self.rate = per_minute / 60.0
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._takes = 0

    def take(self, key: str) -> Refused | None:
        """Spend one request for ``key``: ``None`` if allowed, else the refusal."""
        now = self._clock()
        self._takes += 1
        if self._takes % _PRUNE_EVERY == 0:
            self._prune(now)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(tokens=self.burst, stamp=now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.stamp) * self.rate)
        bucket.stamp = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            bucket.refusing = False
            return None
        first, bucket.refusing = not bucket.refusing, True
        return Refused((1.0 - bucket.tokens) / self.rate, first)

    def _prune(self, now: float) -> None:
        """Forget buckets that have refilled completely (they behave exactly like new ones)."""
        full = [k for k, b in self._buckets.items() if b.tokens + (now - b.stamp) * self.rate >= self.burst]
        for key in full:
            del self._buckets[key]
