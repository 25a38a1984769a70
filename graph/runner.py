"""Running turns: one entry point for the REPL, the HTTP server, workers and tests.

The runner owns what sits *around* a graph run: the caller's ownership of the thread (a
thread id never grants access), one run per thread at a time (a PostgreSQL advisory lock,
so it holds across processes), deciding a listed approval by id (the nodes keep the list:
:mod:`graph.approvals`), and the pre-checks that keep a bad resume from consuming a genuine
pending approval. A turn runs on the one pooled connection that holds its lock
(:mod:`graph.turn_db`): it reads the checkpoint in the lock's round trip, and its transcript
and approval bookkeeping commit with its checkpoint.
"""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command
from psycopg import AsyncConnection, AsyncCursor
from psycopg.rows import DictRow, dict_row

from graph import turn_db
from graph.approvals import decided_statement
from graph.audit import AuditRecord, append_audit
from graph.checkpointer import INTERRUPT_CHANNEL, TurnSaver
from graph.events import TurnEvent
from graph.services import Services
from graph.state import Context
from nodes.execute import ledger_statement
from nodes.picker import claim_statement, setup_statement
from policies.approval import ApprovalClaims, read_token
from policies.errors import ApprovalExpired, ApprovalInvalid, InvalidArgs, NotFound
from policies.hitl import ApprovalRequest, ApprovalResume, parse_resume

__all__ = ["PendingApproval", "TurnOutcome", "TurnRunner"]

_MAX_MESSAGE = 8000


@dataclass
class TurnOutcome:
    """Everything one run produced."""

    thread_id: str
    """The thread."""
    events: list[TurnEvent] = field(default_factory=list)
    """The run's events, in order."""
    reply: str | None = None
    """The reply, when the run completed a turn."""
    outcome: str | None = None
    """What really happened (``executed``, ``read``, ``proposed``, ``rejected``...)."""
    approval: PendingApproval | None = None
    """The approval request, when the run stopped for one."""


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A pending approval as callers see it (the token stays server-side)."""

    approval_id: str
    """The approval id."""
    thread_id: str
    """Its thread."""
    tool: str
    """Tool name."""
    action: str
    """Action name."""
    preview: str
    """What will run."""
    args: dict[str, Any]
    """The exact arguments that will run."""
    expires_at: str
    """ISO 8601 expiry."""


def _lock_key(thread_id: str) -> int:
    return int.from_bytes(hashlib.sha256(thread_id.encode()).digest()[:8], "big", signed=True)


# The same key computed by PostgreSQL (the first 8 bytes of SHA-256, as a signed big-endian integer).
_LOCK_KEY_OF_THREAD_ID = "('x' || left(encode(sha256(convert_to(thread_id, 'UTF8')), 'hex'), 16))::bit(64)::bigint"
_LOCK_SQL = "SELECT pg_advisory_lock(%s) AS locked, (SELECT owner_id FROM threads WHERE thread_id = %s) AS owner_id"
_LOCK_APPROVAL_SQL = f"""SELECT thread_id,
                                CASE WHEN status = 'pending' THEN pg_advisory_lock({_LOCK_KEY_OF_THREAD_ID}) IS NOT NULL END
                                  AS locked
                         FROM approvals WHERE approval_id = %s AND owner_id = %s"""
# Read after the lock is granted (a statement of its own, so a snapshot of its own): the status
# the lock was asked for on may have changed while it waited.
_APPROVAL_UNDER_LOCK_SQL = """SELECT a.status, a.request,
                                     (SELECT owner_id FROM threads t WHERE t.thread_id = a.thread_id) AS thread_owner
                              FROM approvals a WHERE a.approval_id = %s AND a.owner_id = %s"""
_APPROVAL_THREAD_SQL = "(SELECT thread_id FROM approvals WHERE approval_id = %s AND owner_id = %s)"


async def _read_latest(conn: AsyncConnection[Any], query: tuple[str, Any] | None) -> AsyncCursor[DictRow] | None:
    """Send the checkpointer's latest-checkpoint ``query`` on ``conn`` (binary rows, as it reads them)."""
    if query is None:
        return None
    cur = conn.cursor(binary=True, row_factory=dict_row)
    await cur.execute(*query)
    return cur


async def _release(turn: turn_db.TurnDb) -> None:
    """Send what the turn still has to send ahead, then release its lock (unless its last write did)."""
    try:
        await turn_db.flush_ahead(turn)  # audit records the turn's last statements did not carry
    finally:
        if not turn.released:  # never return a connection to the pool holding the lock
            await turn.conn.execute("SELECT pg_advisory_unlock(%s)", (turn.lock_key,))


# Turns holding a thread lock, per pool. A turn holds one connection for its lock and takes
# others briefly for its statements; if every connection of the pool held a lock, no turn could
# take a second one and all would wait for the pool's timeout. Keeping half the pool for
# statements makes concurrency above the pool size queue (holding nothing) instead.
_turn_slots: weakref.WeakKeyDictionary[Any, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _slots(pool: Any) -> asyncio.Semaphore:
    slots = _turn_slots.get(pool)
    if slots is None:
        slots = _turn_slots[pool] = asyncio.Semaphore(max(1, pool.max_size // 2))
    return slots


class TurnRunner:
    """Runs turns of the compiled graph for authenticated callers."""

    def __init__(self, graph: CompiledStateGraph[Any, Context, Any, Any], services: Services) -> None:
        if graph.checkpointer is None:
            raise ValueError("the runner needs a graph compiled with a checkpointer")
        self.graph = graph
        self.services = services

    @staticmethod
    def _config(thread_id: str) -> RunnableConfig:
        return {"configurable": {"thread_id": thread_id}}

    @asynccontextmanager
    async def _owned_thread(
        self, ctx: Context, thread_id: str, *, must_exist: bool, new_message: bool = False
    ) -> AsyncIterator[None]:
        """Hold the thread's lock (across tasks and processes) after checking the caller owns it.

        One round trip takes the lock, reads the owner and reads the thread's latest checkpoint
        (kept for the turn's first read of it) and, for a ``new_message``, runs the picker's
        setup (owner-guarded: it claims nothing of another owner's); another owner's thread is
        indistinguishable from a missing one (``NotFound``). The turn's statements run on this
        same connection (:mod:`graph.turn_db`).
        """
        pool = self.services.db.pool
        saver = self._saver()
        limit = self.services.settings.history_turns
        async with _slots(pool), pool.connection() as conn:
            turn = turn_db.TurnDb(pool=pool, conn=conn, thread_id=thread_id, lock_key=_lock_key(thread_id))
            try:
                async with conn.pipeline():
                    cur = await conn.execute(_LOCK_SQL, (turn.lock_key, thread_id))
                    latest = await _read_latest(conn, saver.latest_query(thread_id) if saver is not None else None)
                    setup = (
                        await conn.execute(*setup_statement(thread_id, ctx.owner_id, limit, locked=True))
                        if new_message else None
                    )
                row = await cur.fetchone()
                owner = row["owner_id"] if row else None
                if (owner is None and must_exist) or (owner is not None and owner != ctx.owner_id):
                    raise NotFound("thread", thread_id)
                await self._prime(turn, latest)
                if setup is not None:
                    turn.setup[(thread_id, ctx.owner_id, limit)] = await setup.fetchone()
                    turn.defer(*claim_statement(thread_id, ctx.owner_id))  # commits with the checkpoint
                with turn_db.bound(turn):
                    yield
            finally:
                await _release(turn)

    @asynccontextmanager
    async def _owned_approval(self, ctx: Context, approval_id: str) -> AsyncIterator[tuple[str, ApprovalRequest]]:
        """Hold the lock of the thread of the caller's pending approval ``approval_id``; yield (thread, request).

        Like :meth:`_owned_thread`, in one round trip, without knowing the thread first: the
        approval row names it, the lock is taken only while the approval is pending, then the
        row, the thread's latest checkpoint and the approval's effect-ledger row (whether it
        already ran) are read under it. Another owner's approval is indistinguishable from a
        missing one (``NotFound``); one that is no longer pending is refused (``ApprovalInvalid``)
        and leaves the lock free.
        """
        pool = self.services.db.pool
        saver = self._saver()
        owner = ctx.owner_id
        async with _slots(pool), pool.connection() as conn:
            try:
                async with conn.pipeline():
                    lock = await conn.execute(_LOCK_APPROVAL_SQL, (approval_id, owner))
                    fresh = await conn.execute(_APPROVAL_UNDER_LOCK_SQL, (approval_id, owner))
                    latest = await _read_latest(
                        conn, saver.latest_query_for(_APPROVAL_THREAD_SQL, (approval_id, owner)) if saver else None
                    )
                    ledger = await conn.execute(*ledger_statement(approval_id, owner))  # for execute, if approved
                locked = await lock.fetchone()
            except BaseException:
                if not conn.broken:  # the lock may have been taken before what failed
                    await conn.execute("SELECT pg_advisory_unlock_all()")
                raise
            if locked is None:
                raise NotFound("approval", approval_id)
            thread_id = str(locked["thread_id"])
            turn = turn_db.TurnDb(pool=pool, conn=conn, thread_id=thread_id, lock_key=_lock_key(thread_id))
            turn.released = not locked["locked"]  # not pending when the lock was asked for: none taken
            try:
                row = await fresh.fetchone()
                if row is None:
                    raise NotFound("approval", approval_id)
                if row["status"] != "pending":
                    raise ApprovalInvalid(f"approval already {row['status']}")
                if row["thread_owner"] != owner:
                    raise NotFound("approval", approval_id)
                await self._prime(turn, latest)
                turn.ledger[(approval_id, owner)] = await ledger.fetchone()
                with turn_db.bound(turn):
                    yield thread_id, row["request"]
            finally:
                await _release(turn)

    def _saver(self) -> TurnSaver | None:
        return self.graph.checkpointer if isinstance(self.graph.checkpointer, TurnSaver) else None

    async def _prime(self, turn: turn_db.TurnDb, latest: AsyncCursor[DictRow] | None) -> None:
        """Keep the latest checkpoint read with the lock for the turn's first read of it."""
        saver = self._saver()
        if latest is None or saver is None:
            return
        loaded, saved = await saver.load_latest(await latest.fetchone())
        await latest.close()
        if loaded:
            turn.prime(turn.thread_id, saved)

    async def _require_thread(self, ctx: Context, thread_id: str, *, must_exist: bool) -> None:
        """Check ownership without taking the lock (for refusals that must not wait on a running turn)."""
        async with self.services.db.pool.connection() as conn:
            cur = await conn.execute("SELECT owner_id FROM threads WHERE thread_id = %s", (thread_id,))
            row = await cur.fetchone()
        owner = row["owner_id"] if row else None
        if (owner is None and must_exist) or (owner is not None and owner != ctx.owner_id):
            raise NotFound("thread", thread_id)  # another owner's thread is indistinguishable from none

    async def _pending_request(self, thread_id: str) -> ApprovalRequest | None:
        """The approval request the thread's checkpoint is interrupted on, if any.

        Read from the checkpoint primed under the lock (its pending interrupt writes) when there
        is one, else from the graph's state.
        """
        turn = turn_db.current(self.services.db.pool)
        primed, saved = turn.peek(thread_id) if turn is not None else (False, None)
        if primed:
            for _task, channel, value in (saved.pending_writes or []) if saved is not None else []:
                if channel != INTERRUPT_CHANNEL:
                    continue
                for intr in value if isinstance(value, (list, tuple)) else [value]:
                    if isinstance(getattr(intr, "value", None), dict) and "approval" in intr.value:
                        request: ApprovalRequest = intr.value
                        return request
            return None
        snapshot = await self.graph.aget_state(self._config(thread_id))
        for task in snapshot.tasks:
            for intr in task.interrupts:
                if isinstance(intr.value, dict) and "approval" in intr.value:
                    found: ApprovalRequest = intr.value
                    return found
        return None

    def _prune_due(self, turn_id: str) -> bool:
        """Whether this finished turn should prune its thread's old checkpoints (about 1 in N)."""
        every = self.services.settings.checkpoint_prune_every
        if every <= 0 or not turn_id:
            return False
        return int(hashlib.sha256(turn_id.encode()).hexdigest()[:8], 16) % every == 0

    async def _prune(self, thread_id: str) -> None:
        """Keep only the latest checkpoint of a thread whose turn has finished.

        LangGraph's saver keeps every checkpoint and every version of every channel; loading
        the latest one then scans the thread's blobs, so a long thread slows down. The
        conversation itself lives in the transcript table, so old checkpoints are only
        time-travel history, bounded here to the last few turns.
        """
        prune = getattr(self.graph.checkpointer, "aprune", None)
        if prune is not None:
            await prune([thread_id], strategy="keep_latest")

    async def _run(self, ctx: Context, thread_id: str, graph_input: Any, *, resume: bool) -> AsyncIterator[TurnEvent]:
        interrupt_value: ApprovalRequest | None = None
        decided: str | None = None
        last_turn = ""
        turn = turn_db.current(self.services.db.pool)
        if turn is not None:
            turn.release_with_interrupt = True  # the checkpoint is written at the run's exit (below)
        try:
            async for mode, chunk in self.graph.astream(
                graph_input,
                self._config(thread_id),
                context=ctx,
                stream_mode=["custom", "updates"],
                durability="exit",
            ):
                if mode == "custom" and isinstance(chunk, dict) and "tollgate_event" in chunk:
                    event: TurnEvent = chunk["tollgate_event"]
                    event = TurnEvent(**event, thread_id=thread_id)
                    if event["type"] == "approval_decided":
                        decided = str(event["data"].get("decision"))  # the node closed its request (graph.approvals)
                    last_turn = event["turn_id"]
                    if (event["type"] == "message_complete" and turn is not None and interrupt_value is None
                            and not self._prune_due(last_turn)):
                        turn.release_early = True  # the checkpoint write is all that is left under the lock
                    yield event
                elif mode == "updates" and isinstance(chunk, dict) and INTERRUPT_CHANNEL in chunk:
                    for intr in chunk[INTERRUPT_CHANNEL]:
                        if isinstance(intr.value, dict) and "approval" in intr.value:
                            interrupt_value = intr.value  # propose listed it, with this checkpoint (graph.approvals)
                            if turn is not None:
                                turn.interrupted = True
        except BaseException:
            # A resumed run that failed after taking its decision has consumed the interrupt:
            # record the decision so the approval is not listed as pending forever.
            if turn is not None:
                turn.take_deferred()  # not run: the run failed before its checkpoint took them
                turn.take_held()  # nor the checkpoint held for the interrupt's writes
            if resume and decided is not None:
                async with self.services.db.pool.connection() as conn:
                    await conn.execute(*decided_statement(decided, thread_id))
            raise
        if turn is not None and ((left := turn.take_deferred()) or turn.held):
            # The checkpointer wrote nothing that took them, or held a checkpoint for writes that
            # never came: they commit together, after the audit records sent ahead.
            await turn_db.flush_ahead(turn, then=[(sql, params, False) for sql, params in left])
        if interrupt_value is None and self._prune_due(last_turn):
            await self._prune(thread_id)

    async def stream(self, ctx: Context, thread_id: str, message: str) -> AsyncIterator[TurnEvent]:
        """Run a new turn with the user's ``message``; yields its events."""
        if not isinstance(message, str) or not message.strip() or len(message) > _MAX_MESSAGE:
            raise InvalidArgs("chat", [f"message must be 1-{_MAX_MESSAGE} characters"])
        # The picker marks an approval this message supersedes, inside the run, under the lock.
        async with self._owned_thread(ctx, thread_id, must_exist=False, new_message=True):
            async for event in self._run(ctx, thread_id, {"messages": [HumanMessage(content=message)]}, resume=False):
                yield event

    async def stream_resume(self, ctx: Context, thread_id: str, value: Any) -> AsyncIterator[TurnEvent]:
        """Resume an interrupted turn; a resume refused before it runs is audited once, then raised.

        The token is checked first (signature, owner, thread), so a tampered or foreign token is
        refused without waiting on the thread's lock or touching the pending request.
        """
        async for event in self._audited_resume(ctx, thread_id, self._checked_resume(ctx, thread_id, value)):
            yield event

    async def _checked_resume(self, ctx: Context, thread_id: str, value: Any) -> AsyncIterator[TurnEvent]:
        await self._require_thread(ctx, thread_id, must_exist=True)
        resume, claims = self._read_resume(ctx, thread_id, value)
        async with self._owned_thread(ctx, thread_id, must_exist=True):
            async for event in self._resume_pending(ctx, thread_id, resume, claims):
                yield event

    async def stream_decision(self, ctx: Context, approval_id: str, decision: dict[str, Any]) -> AsyncIterator[TurnEvent]:
        """Decide an approval by id, as its owner; yields the resumed turn's events.

        An approval that is not pending (decided, superseded, expired and resolved) is refused
        as such; a refusal of the resume itself is audited once, as for :meth:`stream_resume`.
        """
        async with self._owned_approval(ctx, approval_id) as (thread_id, request):
            value = {"token": request["approval"]["token"], "decisions": [decision]}

            async def decided() -> AsyncIterator[TurnEvent]:
                resume, claims = self._read_resume(ctx, thread_id, value)
                async for event in self._resume_pending(ctx, thread_id, resume, claims):
                    yield event

            async for event in self._audited_resume(ctx, thread_id, decided()):
                yield event

    async def _audited_resume(
        self, ctx: Context, thread_id: str, events: AsyncIterator[TurnEvent]
    ) -> AsyncIterator[TurnEvent]:
        """``events``; an :class:`ApprovalInvalid` raised before the first one is audited once, then raised."""
        started = False
        try:
            async for event in events:
                started = True
                yield event
        except ApprovalInvalid as exc:
            if not started:
                record = AuditRecord(owner_id=ctx.owner_id, stage="runner", decision="invalid", reason="resume_refused",
                                     code=exc.code, thread_id=thread_id[:200], detail={"why": exc.reason[:200]})
                await append_audit(self.services.db.pool, record, now=self.services.clock())
            raise

    def _read_resume(self, ctx: Context, thread_id: str, value: Any) -> tuple[ApprovalResume, ApprovalClaims | None]:
        """Parse a raw resume value (token + one decision) and read its token for ``ctx`` on ``thread_id``.

        An expired token reads as no claims: the graph resolves an expired approval as rejected,
        honestly. The graph checks the token again before anything runs.
        """
        resume = parse_resume(value)
        try:
            claims = read_token(resume.token, self.services.key(), now=self.services.clock())
        except ApprovalExpired:
            claims = None
        if claims is not None and (claims.owner_id != ctx.owner_id or claims.thread_id != thread_id):
            raise ApprovalInvalid("token belongs to another owner or thread")
        return resume, claims

    async def _resume_pending(
        self, ctx: Context, thread_id: str, resume: ApprovalResume, claims: ApprovalClaims | None
    ) -> AsyncIterator[TurnEvent]:
        """Under the thread's lock: resume its pending request, if the token names that one."""
        request = await self._pending_request(thread_id)
        if request is None:
            raise ApprovalInvalid("nothing is pending on this thread (already decided or superseded)")
        if claims is not None and claims.nonce != request["approval"]["id"]:
            raise ApprovalInvalid("token is not for the approval pending now")
        if claims is None and resume.token != request["approval"]["token"]:
            raise ApprovalInvalid("token is not for the approval pending now")
        async for event in self._run(ctx, thread_id, Command(resume=resume.model_dump(mode="json")), resume=True):
            yield event

    async def _collect(self, thread_id: str, events: AsyncIterator[TurnEvent]) -> TurnOutcome:
        out = TurnOutcome(thread_id=thread_id)
        async for event in events:
            out.thread_id = out.thread_id or event.get("thread_id", "")
            out.events.append(event)
            if event["type"] == "message_complete":
                out.reply = str(event["data"]["text"])
                out.outcome = str(event["data"]["outcome"])
            elif event["type"] == "approval_required":
                d = event["data"]
                out.outcome = "proposed"
                out.approval = PendingApproval(
                    approval_id=d["approval_id"], thread_id=out.thread_id, tool=d["tool"], action=d["action"],
                    preview=d["preview"], args=d["args"], expires_at=d["expires_at"],
                )
        return out

    async def send(self, ctx: Context, thread_id: str, message: str) -> TurnOutcome:
        """Run a new turn and collect its outcome."""
        return await self._collect(thread_id, self.stream(ctx, thread_id, message))

    async def resume(self, ctx: Context, thread_id: str, value: Any) -> TurnOutcome:
        """Resume with a raw value and collect the outcome."""
        return await self._collect(thread_id, self.stream_resume(ctx, thread_id, value))

    async def decide(self, ctx: Context, approval_id: str, decision: dict[str, Any]) -> TurnOutcome:
        """Decide an approval by id and collect the outcome (its thread is the events')."""
        return await self._collect("", self.stream_decision(ctx, approval_id, decision))

    async def pending_approvals(self, ctx: Context, *, thread_id: str | None = None) -> list[PendingApproval]:
        """The caller's pending approvals (of one thread, with ``thread_id``), newest first."""
        async with self.services.db.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT approval_id, thread_id, tool, action, preview, request, expires_at
                   FROM approvals WHERE owner_id = %s AND status = 'pending'
                   AND (%s::text IS NULL OR thread_id = %s) ORDER BY created_at DESC""",
                (ctx.owner_id, thread_id, thread_id),
            )
            rows = await cur.fetchall()
        return [
            PendingApproval(
                approval_id=r["approval_id"], thread_id=r["thread_id"], tool=r["tool"], action=r["action"],
                preview=r["preview"], args=r["request"]["action_requests"][0]["args"],
                expires_at=r["expires_at"].isoformat(),
            )
            for r in rows
        ]
