"""A per-principal token bucket, kept in memory by each server process.

Keyed on the authenticated owner, never on client-supplied headers (``X-Forwarded-For`` and
friends are trivially forged). Each process keeps its own buckets, so N processes allow up
to N times the rate: enough to stop a runaway client, not a quota system.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RateLimiter"]

_PRUNE_EVERY = 1024


@dataclass
class _Bucket:
    tokens: float
    stamp: float


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

    def take(self, key: str) -> float | None:
        """Spend one request for ``key``: ``None`` if allowed, else seconds until one is."""
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
            return None
        return (1.0 - bucket.tokens) / self.rate

    def _prune(self, now: float) -> None:
        """Forget buckets that have refilled completely (they behave exactly like new ones)."""
        full = [k for k, b in self._buckets.items() if b.tokens + (now - b.stamp) * self.rate >= self.burst]
        for key in full:
            del self._buckets[key]
