"""Thread leases: one turn per thread at a time, across processes, never outliving its turn.

A turn holds its thread through a row of ``thread_leases`` (migration 0009), not a session lock
pinned to a pooled connection: taking it is one statement, and no connection is held while the
turn waits on a model. The lease has a time limit that the holder renews while it runs; a
holder that is cancelled releases it at once, and one that dies (SIGKILL, a lost machine) stops
renewing, so the thread is free again after at most ``ttl`` seconds.

Each take increments the row's ``fence``. Every write a turn makes checks, in its own
transaction, that the fence is still the one it took (:func:`fenced`, :func:`check`), holding
the row ``FOR SHARE`` so that no one can take the thread between the check and the commit. A
holder that lost its lease (stalled past ``ttl``, then came back) is refused with
:class:`LeaseLost` and writes nothing: its successor's work is never clobbered.

The lease of the turn running in the current context is a context variable, so the nodes and
the checkpointer find it without it being passed through LangGraph.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg import AsyncConnection, AsyncPipeline
from psycopg_pool import AsyncConnectionPool

from tollgate.graph.observe import metrics
from tollgate.graph.store import owner_scope
from tollgate.policies.errors import ErrorCode, TollgateError, Unavailable

__all__ = [
    "LEASE_LOST", "Lease", "LeaseLost", "Leases", "bound", "check", "current", "fenced", "fenced_pipeline",
    "fenced_transaction", "lost", "shared", "shielded",
]

_log = logging.getLogger(__name__)

# ``prev`` reads the row as the statement's snapshot saw it (a ``FOR UPDATE`` there would skip the
# row this very statement updates): a holder there whose lease was taken means it ran out. A
# release racing the take can make ``stale`` true needlessly; reconciling is then a no-op.
_ACQUIRE_SQL: Final = """
WITH prev AS (SELECT holder FROM thread_leases WHERE thread_id = %(thread)s)
INSERT INTO thread_leases AS l (thread_id, holder, fence, expires_at)
VALUES (%(thread)s, %(holder)s, 1, clock_timestamp() + make_interval(secs => %(ttl)s))
ON CONFLICT (thread_id) DO UPDATE
    SET holder = EXCLUDED.holder, fence = l.fence + 1, expires_at = EXCLUDED.expires_at
    WHERE l.holder IS NULL OR l.expires_at < clock_timestamp()
RETURNING l.fence, (SELECT holder FROM prev) IS NOT NULL AS stale,
          (SELECT owner_id FROM threads WHERE thread_id = %(thread)s) AS owner_id
"""
_RENEW_SQL: Final = """UPDATE thread_leases l SET expires_at = clock_timestamp() + make_interval(secs => %s)
                       FROM unnest(%s::text[], %s::bigint[], %s::text[]) AS h (thread_id, fence, holder)
                       WHERE l.thread_id = h.thread_id AND l.fence = h.fence AND l.holder = h.holder
                       RETURNING l.thread_id, l.fence"""
_RELEASE_SQL: Final = """UPDATE thread_leases SET holder = NULL, expires_at = clock_timestamp()
                         WHERE thread_id = %s AND fence = %s AND holder = %s"""
_CHECK_SQL: Final = "SELECT tollgate_hold_fence(%s::text, %s::bigint, %s::text)"
_HOLDS_SQL: Final = "SELECT 1 FROM thread_leases WHERE thread_id = %s AND fence = %s AND holder = %s"
LEASE_LOST: Final = "TGL01"
"""The SQLSTATE of a failed fence check (migration 0009's ``tollgate_hold_fence``)."""
_FIRST_RETRY: Final = 0.02
_MAX_RETRY: Final = 0.5


@dataclass(frozen=True, slots=True)
class Lease:
    """A thread taken by one turn."""

    thread_id: str
    """The thread."""
    holder: str
    """Who took it (process and a per-take nonce); a free lease has none."""
    fence: int
    """The fencing token: grows each time the thread is taken."""
    stale: bool
    """The previous holder's lease had run out (it died or stalled): its work may be half done."""
    owner_id: str | None = None
    """The thread's owner when the lease was taken (``None``: a thread not claimed yet)."""


class LeaseLost(TollgateError):
    """The turn no longer holds its thread (taken by another after its lease ran out); it may not write."""

    code: ErrorCode = "unavailable"

    def __init__(self, thread_id: str, fence: int) -> None:
        self.thread_id = thread_id
        self.fence = fence
        super().__init__(f"lease {fence} on thread {thread_id!r} was lost; nothing was written")


_current: ContextVar[Lease | None] = ContextVar("tollgate_lease", default=None)


def current() -> Lease | None:
    """The lease of the turn running in this context, if any (none in Studio's own runs)."""
    return _current.get()


@contextmanager
def bound(lease: Lease) -> Iterator[Lease]:
    """Make ``lease`` the current one for the block and the tasks it starts."""
    token = _current.set(lease)
    try:
        yield lease
    finally:
        try:
            _current.reset(token)
        except ValueError:  # closed from another context (an abandoned generator finalized later)
            _current.set(None)


async def check(conn: AsyncConnection[Any], lease: Lease) -> None:
    """Queue the fence check of ``lease`` on ``conn``, in the transaction of what follows it.

    The check holds the lease row ``FOR SHARE`` until that transaction ends, so the thread cannot
    be taken from this holder between the check and the commit; when the lease was lost it fails
    the transaction (SQLSTATE :data:`LEASE_LOST`), and nothing queued after it runs.
    """
    await conn.execute(_CHECK_SQL, (lease.thread_id, lease.fence, lease.holder))


async def _holds(conn: AsyncConnection[Any], lease: Lease) -> bool:
    """Whether ``lease`` still holds its thread (a plain read, outside any transaction)."""
    cur = await conn.execute(_HOLDS_SQL, (lease.thread_id, lease.fence, lease.holder))
    return await cur.fetchone() is not None


def lost(exc: BaseException) -> bool:
    """Whether ``exc`` is the database saying the fence check failed."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate == LEASE_LOST


@asynccontextmanager
async def fenced_pipeline(
    pool: AsyncConnectionPool[Any], *, owner: str | None = None
) -> AsyncIterator[tuple[AsyncConnection[Any], AsyncPipeline]]:
    """A pooled connection and its pipeline, whose statements commit together after the lease's fence check.

    On an autocommit connection PostgreSQL runs everything sent before a pipeline's Sync as one
    implicit transaction (the extended query protocol's rule), so the check, the block's
    statements and the commit cost one round trip, plus one per result read inside the block.
    If the lease was lost (:class:`LeaseLost`) or a statement fails, none of it is committed.
    Without a current lease (Studio's own runs) there is nothing to check. With ``owner``, the
    block is scoped to that owner's rows (:mod:`graph.store.owner_scope`), at no extra round trip.
    """
    lease = current()
    async with pool.connection() as conn:
        try:
            async with conn.pipeline() as pipeline:
                if lease is not None:
                    await check(conn, lease)
                if owner is not None:
                    await owner_scope.scope(conn, owner)
                yield conn, pipeline
        except psycopg.Error as exc:
            # In a pipeline the first error may reach the caller as a later statement's
            # PipelineAborted: whether the lease was lost is asked again, outside it.
            if lease is not None and (lost(exc) or not await _holds(conn, lease)):
                raise LeaseLost(lease.thread_id, lease.fence) from None
            raise


@asynccontextmanager
async def fenced(pool: AsyncConnectionPool[Any], *, owner: str) -> AsyncIterator[AsyncConnection[Any]]:
    """:func:`fenced_pipeline` scoped to ``owner``'s rows, for a block that needs only the connection."""
    async with fenced_pipeline(pool, owner=owner) as (conn, _pipeline):
        yield conn


@asynccontextmanager
async def fenced_transaction(pool: AsyncConnectionPool[Any], *, owner: str) -> AsyncIterator[AsyncConnection[Any]]:
    """Like :func:`fenced`, as an explicit transaction: for a tool's effect, whose code may open
    savepoints of its own (``conn.transaction()`` inside it nests)."""
    lease = current()
    async with pool.connection() as conn:
        try:
            async with conn.transaction():
                if lease is not None:
                    await check(conn, lease)
                await owner_scope.scope(conn, owner)
                yield conn
        except psycopg.Error as exc:
            if lease is not None and lost(exc):
                raise LeaseLost(lease.thread_id, lease.fence) from None
            raise


def _holder() -> str:
    return f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


class Leases:
    """Takes, renews and releases thread leases on one pool.

    One task renews every lease the object holds, in one statement, whatever their number.
    """

    def __init__(self, pool: AsyncConnectionPool[Any], *, ttl_seconds: float, wait_seconds: float) -> None:
        if ttl_seconds <= 0 or wait_seconds < 0:
            raise ValueError("a lease needs a positive time to live and a non-negative wait")
        self.pool = pool
        self.ttl = ttl_seconds
        self.wait = wait_seconds
        self._held: set[Lease] = set()
        self._unreleased: dict[str, Lease] = {}
        """Leases whose release failed, by thread: released again before their thread is next taken."""
        self._keeper: asyncio.Task[None] | None = None

    async def try_acquire(self, thread_id: str) -> Lease | None:
        """Take the thread if it is free or its holder's lease ran out; ``None`` if it is held.

        Cancel-safe: a caller cancelled while the statement is in flight cannot know whether it
        took the thread, so the statement runs to its end and a lease it took is released.
        """
        take = asyncio.ensure_future(self._take(thread_id))
        try:
            return await asyncio.shield(take)
        except asyncio.CancelledError:
            await shielded(self._give_back(take), what="giving back a lease taken for a cancelled turn")
            raise

    async def _give_back(self, take: asyncio.Future[Lease | None]) -> None:
        await asyncio.wait([take])
        if not take.cancelled() and take.exception() is None and (lease := take.result()) is not None:
            await self.release(lease)

    async def _take(self, thread_id: str) -> Lease | None:
        holder = _holder()
        async with self.pool.connection() as conn:
            cur = await conn.execute(_ACQUIRE_SQL, {"thread": thread_id, "holder": holder, "ttl": self.ttl})
            row = await cur.fetchone()
        if row is None:
            return None
        return Lease(thread_id=thread_id, holder=holder, fence=int(row["fence"]), stale=bool(row["stale"]),
                     owner_id=row["owner_id"])

    async def acquire(self, thread_id: str) -> Lease:
        """Take the thread, waiting up to ``wait_seconds`` for its holder; else :class:`Unavailable`."""
        unreleased = self._unreleased.pop(thread_id, None)
        if unreleased is not None:
            try:
                await self.release(unreleased)
            except Exception:  # noqa: BLE001 - still away: the wait below ends with the lease's time limit
                self._unreleased[thread_id] = unreleased
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self.wait
        delay = _FIRST_RETRY
        while True:
            lease = await self.try_acquire(thread_id)
            if lease is not None:
                if delay > _FIRST_RETRY:  # it waited for another holder
                    metrics.LEASE_WAITS.labels("acquired").observe(loop.time() - started)
                return lease
            if loop.time() >= deadline:
                metrics.LEASE_WAITS.labels("timed_out").observe(loop.time() - started)
                raise Unavailable(f"thread {thread_id!r} (another turn is still running on it)")
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_RETRY)

    async def renew(self, held: list[Lease]) -> set[Lease]:
        """Extend every lease of ``held`` in one statement; return those still held (the rest were lost)."""
        if not held:
            return set()
        async with self.pool.connection() as conn:
            cur = await conn.execute(_RENEW_SQL, (self.ttl, [h.thread_id for h in held], [h.fence for h in held],
                                                  [h.holder for h in held]))
            kept = {(str(r["thread_id"]), int(r["fence"])) for r in await cur.fetchall()}
        return {h for h in held if (h.thread_id, h.fence) in kept}

    async def release(self, lease: Lease) -> None:
        """Free the thread (a lease already taken by another is left alone)."""
        self._held.discard(lease)
        async with self.pool.connection() as conn:
            await conn.execute(_RELEASE_SQL, (lease.thread_id, lease.fence, lease.holder))

    async def _keep(self) -> None:
        """Renew every lease this process holds, a third of their time to live apart, in one statement."""
        while True:
            await asyncio.sleep(self.ttl / 3)
            held = list(self._held)
            if not held:
                self._keeper = None
                return
            try:
                kept = await self.renew(held)
            except Exception as exc:  # retried at the next tick; the fence protects the writes meanwhile
                _log.warning("could not renew the thread leases: %s", type(exc).__name__)
                continue
            for lease in held:
                if lease not in kept and lease in self._held:
                    self._held.discard(lease)
                    _log.warning("lease on a thread was lost (fence %d); its turn can no longer write", lease.fence)

    @asynccontextmanager
    async def hold(self, thread_id: str) -> AsyncIterator[Lease]:
        """Hold ``thread_id`` for the block (renewed while it runs), as the current lease.

        Leaving the block releases the lease whatever happens, a cancellation included: the
        release runs shielded, so a cancelled turn frees its thread at once. Callers serialize
        their own turns on one thread in process (the runner does); this waits only for holders
        elsewhere.
        """
        lease = await self.acquire(thread_id)
        self._held.add(lease)
        if self._keeper is None:
            self._keeper = asyncio.create_task(self._keep(), name="thread-leases")
        try:
            with bound(lease):
                yield lease
        finally:
            await shielded(self._release_or_keep(lease), what="releasing a thread lease (it ends with its time limit)")

    async def _release_or_keep(self, lease: Lease) -> None:
        """Release ``lease``; one that could not be (the database was away) is released again
        before this process next takes its thread, instead of blocking it until it expires."""
        try:
            await self.release(lease)
        except Exception:
            self._unreleased[lease.thread_id] = lease
            raise


_shared: weakref.WeakKeyDictionary[AsyncConnectionPool[Any], dict[tuple[float, float], Leases]] = (
    weakref.WeakKeyDictionary())


def shared(pool: AsyncConnectionPool[Any], settings: Any) -> Leases:
    """The process's one :class:`Leases` over ``pool`` for ``settings``' ``thread_lease_seconds`` and
    ``thread_wait_seconds`` (one renewal task for every lease it holds)."""
    key = (float(settings.thread_lease_seconds), float(settings.thread_wait_seconds))
    by_times = _shared.setdefault(pool, {})
    if key not in by_times:
        by_times[key] = Leases(pool, ttl_seconds=key[0], wait_seconds=key[1])
    return by_times[key]


async def shielded(work: Awaitable[Any], *, what: str) -> None:
    """Run ``work`` to its end even if the caller is cancelled meanwhile; log (never raise) its failure.

    For clean-up that must happen whatever stops a turn (a lease's release, a reconciliation);
    ``what`` names it in the log. A cancellation still reaches the caller once ``work`` is done.
    """
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        if not task.cancelled() and task.exception() is not None:
            _log.warning("%s failed: %s", what, type(task.exception()).__name__)
        raise
    except Exception as exc:
        _log.warning("%s failed: %s", what, type(exc).__name__)
