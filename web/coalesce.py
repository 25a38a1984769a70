"""One statement for many concurrent callers: what arrives while a batch is in flight goes in the next.

The server runs many requests at once, and several of their queries are the same statement
with different arguments (a bearer token's owner, a run's events for the log). A
:class:`Coalescer` sends them as one statement per batch instead of one each, each on its own
pooled connection: the same group commit a database does with its write-ahead log. A caller
that comes alone goes at once (no waiting for company); callers that come while a batch is in
flight wait for it to finish (one round trip at most) and then go together.

A batch that fails is retried one item at a time, so a bad item fails only its own caller;
that is safe because the batch function is one statement (it did nothing when it failed) and
idempotent (reads, or upserts keyed by their content). A batch that fails because the database
is out of reach (``psycopg.OperationalError``, a pool timeout included) fails all its callers at
once instead of making each wait on the outage in turn. Not a library: the dataloader packages
for Python batch within one tick of the event loop, which under load leaves most callers
alone; this batches for as long as the previous batch takes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import psycopg

__all__ = ["Coalescer"]

In = TypeVar("In")
Out = TypeVar("Out")


class Coalescer(Generic[In, Out]):
    """Calls ``run(items) -> results`` (same length, same order) with every item queued since the last batch."""

    def __init__(self, run: Callable[[Sequence[In]], Awaitable[Sequence[Out]]], *, name: str) -> None:
        self._run = run
        self._name = name
        self._queue: list[tuple[In, asyncio.Future[Out]]] = []
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, item: In) -> Out:
        """``item``'s result, computed in a batch with whatever else is queued."""
        future: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name=self._name)
        # The batch runs whether or not this caller still waits for it: a caller cancelled
        # while waiting cancels only its future, which the batch then skips (see _set).
        return await future

    async def _drain(self) -> None:
        batch: list[tuple[In, asyncio.Future[Out]]] = []
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                await self._settle(batch)
        except BaseException:  # cancelled (shutdown): nobody waits forever for a batch that will not run
            for _, future in [*batch, *self._queue]:
                future.cancel()
            self._queue = []
            raise

    async def _settle(self, batch: list[tuple[In, asyncio.Future[Out]]]) -> None:
        try:
            results = await self._run([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"{self._name}: {len(results)} results for {len(batch)} items")
        except Exception as exc:
            if len(batch) == 1 or isinstance(exc, psycopg.OperationalError):
                # The database is unreachable (or the pool timed out): every item would wait on the
                # same outage again, one after another. Only other errors may be an item's own.
                for _, future in batch:
                    _set(future, exception=exc)
                return
            for one in batch:  # alone, so a bad item fails only its own caller
                await self._settle([one])
            return
        for (_, future), result in zip(batch, results, strict=True):
            _set(future, result=result)


def _set(future: asyncio.Future[Out], *, result: Out | None = None, exception: BaseException | None = None) -> None:
    if future.done():  # its caller was cancelled and no longer waits
        return
    if exception is not None:
        future.set_exception(exception)
        future.exception()  # retrieved: a caller that went away must not log "never retrieved"
    else:
        future.set_result(result)  # type: ignore[arg-type]
