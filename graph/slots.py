"""How many turns a process runs at once: a cap per process and a cap per owner.

A turn holds no database connection while it waits on a model, so concurrency is bounded by
what the process can carry (memory, the model provider's limits), not by the pool. The
per-owner cap comes first: one owner's hundred turns queue behind their own cap and hold no
process slot, so they cannot starve other owners.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["TurnSlots"]


class TurnSlots:
    """Admission for turns: at most ``total`` at once, at most ``per_owner`` of any one owner."""

    def __init__(self, total: int, per_owner: int) -> None:
        if total < 1 or per_owner < 1:
            raise ValueError("turn slots need positive caps")
        self.total = total
        self.per_owner = per_owner
        self._all = asyncio.Semaphore(total)
        self._owners: dict[str, tuple[asyncio.Semaphore, int]] = {}
        self._running = 0

    @asynccontextmanager
    async def hold(self, owner_id: str) -> AsyncIterator[None]:
        """Wait for a slot of ``owner_id``, then one of the process; hold both for the block."""
        semaphore, users = self._owners.get(owner_id) or (asyncio.Semaphore(self.per_owner), 0)
        self._owners[owner_id] = (semaphore, users + 1)
        try:
            async with semaphore, self._all:
                self._running += 1
                try:
                    yield
                finally:
                    self._running -= 1
        finally:
            semaphore, users = self._owners[owner_id]
            if users <= 1:
                del self._owners[owner_id]  # no owner keeps a semaphore once idle
            else:
                self._owners[owner_id] = (semaphore, users - 1)

    def running(self) -> int:
        """Turns holding a process slot now."""
        return self._running
