"""One connection per turn: the connection that holds a thread's lock also runs the turn's statements.

The runner holds a pooled connection for the thread's advisory lock for the whole turn. While it
does (:func:`bound`), :func:`connection` hands that same connection to the turn's nodes, its
audit records and its checkpointer instead of a second one from the pool. A turn then needs one
connection however many statements it runs (no pool exhaustion under load, no acquire and
release per statement), and statements can share round trips and commits: the runner reads
the latest checkpoint (:meth:`TurnDb.prime`) and runs the picker's setup in the round trip that
takes the lock, and the turn's closing bookkeeping (:meth:`TurnDb.defer`) and the lock's
release go with its checkpoint write. Audit records (:meth:`TurnDb.send_ahead`) ride with the
turn's next statement, each committed on its own before it; the record of a decision an action
follows is sent at once instead (:func:`send_now`), and the action's statement waits for it.

Within a turn the graph runs one node at a time, and the checkpointer's own operations take
:attr:`TurnDb.lock`, so the connection never carries two statements at once. Code outside the
graph (the HTTP hub, the background ledger, other turns) keeps using the pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple
from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline
from psycopg.pq import TransactionStatus

from policies.errors import Unavailable

__all__ = [
    "TurnDb", "bound", "connection", "current", "flush_ahead", "queue_ahead", "run_statements", "send_now", "settle",
    "transaction", "with_checkpoint",
]


@dataclass(eq=False)
class TurnDb:
    """The connection of the turn running in this context, and what it has read ahead."""

    pool: Any
    """The pool the connection came from (statements for another pool do not use it)."""
    conn: AsyncConnection[Any]
    """The connection holding the thread's lock."""
    thread_id: str
    """The thread the turn runs on."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Serializes the checkpointer's operations on the connection (it may write from background tasks)."""
    primed: dict[str, CheckpointTuple | None] = field(default_factory=dict)
    """The thread's latest checkpoint, read under the lock, for the next read of it (once)."""
    lock_key: int = 0
    """The thread's advisory lock."""
    release_early: bool = False
    """The turn is over but for its checkpoint write: release the lock in that write's round trip."""
    release_with_interrupt: bool = False
    """The run writes its checkpoint at its exit: an interrupt's writes on that checkpoint, once
    it is written or held (:attr:`written_checkpoint`), are then its last statements, and release
    the lock in their round trip."""
    written_checkpoint: str = ""
    """The id of the last checkpoint the turn wrote (or holds, see :attr:`held`)."""
    interrupted: bool = False
    """The run stopped at an interrupt: its exit checkpoint is held for the interrupt's writes."""
    held: list[tuple[str, Any, bool]] = field(default_factory=list)
    """A checkpoint write held back (``(sql, params, many)`` each): it goes first in the turn's next
    statement's round trip, in its transaction (an interrupted run's checkpoint, with its writes)."""
    released: bool = False
    """Whether the checkpoint write released the lock."""
    setup: dict[tuple[str, str, int], dict[str, Any] | None] = field(default_factory=dict)
    """The picker's setup row for a new message, run in the lock's round trip (once)."""
    deferred: list[tuple[str, Any]] = field(default_factory=list)
    """Statements that commit with the turn's checkpoint (sent in its write's round trip)."""
    ahead: list[tuple[str, Any]] = field(default_factory=list)
    """Statements sent ahead of the turn's next one, each committed on its own (audit records)."""
    ledger: dict[tuple[str, str], dict[str, Any] | None] = field(default_factory=dict)
    """Effect-ledger rows (by key and owner) read in the lock's round trip, for one read each."""
    sending: asyncio.Task[None] | None = None
    """Statements sent ahead before the turn's next one (:func:`send_now`), still in flight:
    nothing else uses the connection until they are committed (:func:`settle`)."""

    def send_ahead(self, sql: str, params: Any) -> None:
        """Commit ``sql`` on its own, in the round trip of the turn's next statement.

        For audit records: a record is committed before anything the turn does next reaches the
        database (in its own transaction, so it stays even if what follows fails), without a
        round trip of its own. What is still queued when the turn ends is sent then.
        """
        self.ahead.append((sql, params))

    def take_setup(self, thread_id: str, owner_id: str, limit: int) -> tuple[bool, dict[str, Any] | None]:
        """(whether the picker's setup ran ahead for these arguments, its row), consuming it."""
        key = (thread_id, owner_id, limit)
        if key not in self.setup:
            return False, None
        return True, self.setup.pop(key)

    def take_ledger(self, key: str, owner_id: str) -> tuple[bool, dict[str, Any] | None]:
        """(whether the ledger row of ``key`` was read ahead, the row), consuming it.

        Read under the thread's lock, it is still current: only a run holding that lock executes
        the thread's approvals (and the ledger's key rejects a second row regardless).
        """
        if (key, owner_id) not in self.ledger:
            return False, None
        return True, self.ledger.pop((key, owner_id))

    def defer(self, sql: str, params: Any) -> None:
        """Run ``sql`` in the transaction of the turn's next checkpoint write (before it).

        For bookkeeping that belongs with the checkpoint (the transcript, an approval's status):
        one commit instead of two, and both or neither. The runner runs what is left after the
        graph (a checkpointer that never wrote).
        """
        self.deferred.append((sql, params))

    def take_held(self) -> list[tuple[str, Any, bool]]:
        """The held checkpoint statements, in order, now owned by the caller."""
        out, self.held = self.held, []
        return out

    def take_deferred(self) -> list[tuple[str, Any]]:
        """The deferred statements, in order, now owned by the caller."""
        out, self.deferred = self.deferred, []
        return out

    def prime(self, thread_id: str, saved: CheckpointTuple | None) -> None:
        """Keep ``saved`` as the latest checkpoint of ``thread_id`` (root namespace) for one read."""
        self.primed[thread_id] = saved

    def take(self, thread_id: str) -> tuple[bool, CheckpointTuple | None]:
        """(whether one was primed, the primed checkpoint), consuming it."""
        if thread_id not in self.primed:
            return False, None
        return True, self.primed.pop(thread_id)

    def peek(self, thread_id: str) -> tuple[bool, CheckpointTuple | None]:
        """Like :meth:`take`, without consuming it."""
        if thread_id not in self.primed:
            return False, None
        return True, self.primed[thread_id]


_current: ContextVar[TurnDb | None] = ContextVar("tollgate_turn_db", default=None)


def current(pool: Any) -> TurnDb | None:
    """The turn running in this context on ``pool``, if any.

    A turn whose connection broke is refused (:class:`~policies.errors.Unavailable`), not left
    for the pool: the thread's lock went with that connection, and so did the audit records it
    had not committed, so nothing the turn would do next may run (a retry on a fresh connection
    would run an action whose record was lost).
    """
    turn = _current.get()
    if turn is None or turn.pool is not pool:
        return None
    if turn.conn.closed or turn.conn.broken:
        raise Unavailable("the turn's database connection")
    return turn


async def with_checkpoint(pool: Any, sql: str, params: Any) -> None:
    """Run ``sql`` with the current turn's next checkpoint (:meth:`TurnDb.defer`), or at once outside a turn.

    Outside a turn is a graph run without the runner (``langgraph dev`` and Studio): the
    statement commits on its own, before the platform's checkpoint.
    """
    turn = current(pool)
    if turn is not None:
        turn.defer(sql, params)
        return
    async with pool.connection() as conn:
        await conn.execute(sql, params)


@contextmanager
def bound(turn: TurnDb) -> Iterator[TurnDb]:
    """Make ``turn`` the current turn for the block (and the tasks it starts)."""
    token = _current.set(turn)
    try:
        yield turn
    finally:
        try:
            _current.reset(token)
        except ValueError:
            # Closed from another context (an abandoned generator finalized later): that context
            # never saw the turn, and this one ends here.
            _current.set(None)


async def queue_ahead(turn: TurnDb, pipeline: AsyncPipeline) -> None:
    """Queue ``turn``'s statements sent ahead into ``pipeline`` (open on its connection), then a Sync.

    The Sync ends their implicit transaction: they commit whatever the statements queued after
    them do. psycopg has no public call that queues a Sync without waiting for it, so this uses
    its pipeline's own ``_enqueue_sync`` (psycopg is pinned; ``tests/test_audit.py`` checks that a
    record sent ahead commits when the statement after it fails).
    """
    statements, turn.ahead = turn.ahead, []
    for sql, params in statements:
        await turn.conn.execute(sql, params)
    if statements:
        pipeline._enqueue_sync()


def send_now(turn: TurnDb) -> None:
    """Start committing what is queued ahead now, without waiting: the commit overlaps the work
    the turn does before its next statement, which waits for it (:func:`settle`).

    For the record of a decision an action follows (the gate's read or proposal, an approval):
    the action must not run before the record is committed, and between the two the turn spends
    about as long (a graph step, about 0.7 ms) as the commit takes, so the action no longer
    waits a round trip and a commit for it (``python -m bench --only P1,P2``). A round trip
    more, off the turn's path: the commits are the same.
    """
    if turn.ahead and turn.sending is None and not (turn.conn.closed or turn.conn.broken):
        statements, turn.ahead = turn.ahead, []  # what comes later rides with the next statement
        turn.sending = asyncio.create_task(_commit(turn.conn, statements), name=f"turn-ahead:{turn.thread_id}")
        turn.sending.add_done_callback(_retrieve)  # also seen by settle; this covers a turn that never settles


async def _commit(conn: AsyncConnection[Any], statements: Sequence[tuple[str, Any]]) -> None:
    """Run ``statements`` in one round trip, committed together (the pipeline's Sync ends their transaction)."""
    async with conn.pipeline():
        for sql, params in statements:
            await conn.execute(sql, params)


def _retrieve(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


async def settle(turn: TurnDb) -> None:
    """Wait until what :func:`send_now` started is committed; raise its error if it failed.

    Every use of the turn's connection settles first. A caller cancelled meanwhile still waits
    for the send to end (one round trip), so nothing else reaches the connection mid-pipeline.
    """
    task = turn.sending
    if task is None:
        return
    turn.sending = None
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            await asyncio.wait([task])
        raise


async def run_statements(cur: AsyncCursor[Any], statements: Sequence[tuple[str, Any, bool]]) -> None:
    """Run ``(sql, params, many)`` statements on ``cur`` (queued, in its connection's pipeline if it has one)."""
    for sql, params, many in statements:
        if many:
            await cur.executemany(sql, params)
        else:
            await cur.execute(sql, params)


async def flush_ahead(turn: TurnDb, then: Sequence[tuple[str, Any, bool]] = ()) -> None:
    """Send what is still queued ahead, then ``then`` and a held checkpoint, in one round trip.

    The statements after the audit records commit together (the pipeline's last Sync ends
    their implicit transaction).
    """
    await settle(turn)
    statements = [*then, *turn.take_held()]
    if (turn.ahead or statements) and not (turn.conn.closed or turn.conn.broken):
        async with turn.conn.pipeline() as pipeline, turn.conn.cursor(binary=True) as cur:
            await queue_ahead(turn, pipeline)
            await run_statements(cur, statements)


@asynccontextmanager
async def connection(pool: Any, *, transaction_next: bool = False) -> AsyncIterator[AsyncConnection[Any]]:
    """The current turn's connection, or one from ``pool`` for the block.

    On the turn's connection, statements queued ahead (:meth:`TurnDb.send_ahead`) are committed
    first, so nothing the block does runs before them. ``transaction_next``: the block opens a
    :func:`transaction` at once, which sends them in its own first round trip instead.
    """
    turn = current(pool)
    if turn is not None:
        if not transaction_next:
            await flush_ahead(turn)
        yield turn.conn
        return
    async with pool.connection() as conn:
        yield conn


@asynccontextmanager
async def transaction(conn: AsyncConnection[Any], *, read_only: bool = False) -> AsyncIterator[AsyncConnection[Any]]:
    """A transaction whose ``BEGIN`` and ``COMMIT`` share round trips with the block's statements.

    ``conn.transaction()`` spends a round trip on ``BEGIN`` and another on ``COMMIT``, and inside
    a pipeline it syncs on both. Here the block runs in a pipeline: ``BEGIN`` goes with its first
    statement whose result is read, ``COMMIT`` with whatever it sent last. Any error rolls back.
    On the current turn's connection, statements queued ahead go before ``BEGIN``, committed on
    their own. ``conn`` must be in autocommit mode (the pool's connections are) and outside a
    transaction.
    """
    if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        raise RuntimeError("a pipelined transaction needs an idle autocommit connection")
    turn = _current.get()
    if turn is not None and turn.conn is conn:
        await settle(turn)
    try:
        async with conn.pipeline() as pipeline:
            if turn is not None and turn.conn is conn:
                await queue_ahead(turn, pipeline)  # committed first, each on its own
                if turn.held:  # a held checkpoint goes before it, committed on its own
                    async with conn.cursor(binary=True) as cur:
                        await run_statements(cur, turn.take_held())
                    pipeline._enqueue_sync()  # see queue_ahead
            await conn.execute("BEGIN READ ONLY" if read_only else "BEGIN")
            yield conn
            await conn.execute("COMMIT")
    except BaseException:
        if not conn.broken and conn.info.transaction_status != TransactionStatus.IDLE:
            await conn.rollback()
        raise
