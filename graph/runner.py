"""Running turns: one entry point for the REPL, the HTTP server, workers and tests.

The runner owns what sits *around* a graph run:

* **Ownership.** A thread id never grants access: another owner's thread is indistinguishable
  from a missing one (``NotFound``). Run and inbox threads are written by the server only; a
  chat message there is refused (:class:`~policies.errors.ThreadReadOnly`).
* **One turn per thread.** A turn holds its thread through a lease (:mod:`graph.store.leases`), taken
  after an admission slot (:mod:`graph.slots`): it never holds a database connection across a
  model call, a cancelled turn frees its thread at once, a dead process's within the lease's
  time, and every write of a turn that lost its lease is refused.
* **Approvals by id.** Deciding a listed approval, with every check a resume needs made
  *before* the graph resumes (the approval node's own check, :attr:`GovernedGraph.check_resume`): a malformed decision, a
  wrong count, a foreign token or an edit that fails validation is refused with a typed error
  and the approval stays pending.
* **Clean ends.** A turn that does not end cleanly (cancelled, failed, or found half done by the
  next holder of its thread) has its approvals brought back in line with its checkpoint and the
  effects ledger (:func:`graph.ledger.approvals.reconcile`): nothing is left "approved" with nothing run.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from tollgate.graph.events import TurnEvent
from tollgate.graph.governed import GovernedGraph
from tollgate.graph.ledger import approvals
from tollgate.graph.ledger.audit import AuditRecord, append_audit
from tollgate.graph.services import Services
from tollgate.graph.slots import TurnSlots
from tollgate.graph.state import Context
from tollgate.graph.store import leases, owner_scope
from tollgate.graph.store.leases import Lease, bound
from tollgate.policies.errors import ApprovalInvalid, InvalidArgs, NotFound, TollgateError
from tollgate.policies.hitl import ApprovalRequest, CardWarning, joined_preview
from tollgate.policies.storable import unstorable

__all__ = ["PendingAction", "PendingApproval", "TurnOutcome", "TurnRunner"]

_log = logging.getLogger(__name__)

_MAX_MESSAGE: Final = 8000
_PENDING_SQL: Final = """SELECT approval_id, thread_id, tool, action, preview, request, expires_at
                         FROM approvals WHERE owner_id = %s AND status = 'pending' AND expires_at > %s
                         AND approval_id = request_id
                         AND (%s::text IS NULL OR thread_id = %s) ORDER BY created_at DESC"""
_APPROVAL_SQL: Final = """SELECT thread_id, status, error, expires_at, request_id FROM approvals
                          WHERE approval_id = %s AND owner_id = %s"""
_STALE_SQL: Final = """SELECT l.thread_id, t.owner_id FROM thread_leases l JOIN threads t USING (thread_id)
                       WHERE l.holder IS NOT NULL AND l.expires_at < clock_timestamp()
                       LIMIT %s"""


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
class PendingAction:
    """One action of a pending approval request."""

    approval_id: str
    """The action's own approval id."""
    tool: str
    """Tool name."""
    action: str
    """Action name."""
    preview: str
    """What it will do."""
    args: dict[str, Any]
    """The exact arguments it will run with."""
    allowed_decisions: tuple[str, ...] = ("approve", "edit", "reject")
    """The decisions a reviewer may take."""
    provenance: dict[str, str] = field(default_factory=dict)
    """Where each argument's value came from ("typed by you", "from someone else's content: …")."""
    warnings: tuple[CardWarning, ...] = ()
    """The card's warnings and notes, each with its code (also at the top of ``preview``)."""


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A pending approval request as callers see it (the token stays server-side).

    The top-level fields describe its first action (all of it, for a request of one action);
    ``actions`` lists every action, each decided in the same resume, in order.
    """

    approval_id: str
    """The request's id (its first action's approval id)."""
    thread_id: str
    """Its thread."""
    tool: str
    """Tool name (of the first action)."""
    action: str
    """Action name (of the first action)."""
    preview: str
    """What will run (every action's, numbered when several)."""
    args: dict[str, Any]
    """The exact arguments the first action will run with."""
    expires_at: str
    """ISO 8601 expiry."""
    actions: tuple[PendingAction, ...] = ()
    """Every action of the request, in order."""

    @classmethod
    def of(cls, thread_id: str, request: ApprovalRequest, preview: str, expires_at: str) -> PendingApproval:
        """The caller's view of ``request``."""
        bindings = approvals.actions_of(request)
        actions = tuple(
            PendingAction(approval_id=b["id"], tool=b["tool"], action=b["action"], preview=r["description"],
                          args=r["args"], allowed_decisions=tuple(c["allowed_decisions"]),
                          provenance=dict(r.get("provenance") or {}), warnings=tuple(r.get("warnings") or ()))
            for b, r, c in zip(bindings, request["action_requests"], request["review_configs"], strict=True))
        block = request["approval"]
        return cls(approval_id=block["id"], thread_id=thread_id, tool=block["tool"], action=block["action"],
                   preview=preview, args=request["action_requests"][0]["args"], expires_at=expires_at,
                   actions=actions)


def _preview_of(request: ApprovalRequest) -> str:
    return joined_preview([r["description"] for r in request["action_requests"]])


def _closed(row: dict[str, Any] | None) -> str:
    """Why an approval that is no longer pending cannot be decided, with what ended it (an honest account)."""
    if row is None:
        return "approval already closed"
    return f"approval already {row['status']}" + (f": {row['error']}" if row.get("error") else "")


class TurnRunner:
    """Runs turns of the compiled graph for authenticated callers."""

    def __init__(self, graph: GovernedGraph, services: Services) -> None:
        if graph.checkpointer is None:
            raise ValueError("the runner needs a graph compiled with a checkpointer")
        settings = services.settings
        self.graph = graph
        self.services = services
        self.leases = leases.shared(services.db.pool, settings)
        """The thread leases (the process's, shared with the graph's own runs)."""
        self.slots = TurnSlots(settings.max_concurrent_turns, settings.max_turns_per_owner)
        """Admission: turns of this process and of each owner at once."""
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    @staticmethod
    def _config(thread_id: str) -> RunnableConfig:
        return {"configurable": {"thread_id": thread_id}}

    # --- holding a thread ---------------------------------------------------------------------

    @asynccontextmanager
    async def _hold(self, ctx: Context, thread_id: str, *, must_exist: bool) -> AsyncIterator[Lease]:
        """Hold ``thread_id`` for a turn of ``ctx``'s owner: in process, then a slot, then the lease.

        Turns queued on one thread wait on an in-process lock first, holding no slot. The lease is
        the graph's (:meth:`graph.governed.GovernedGraph.hold`): another owner's thread (or a missing
        one, with ``must_exist``) is ``NotFound``, and a thread taken over from a holder that ran
        out of time is reconciled first. The graph's run inside the block uses this lease.
        """
        lock = self._locks.get(thread_id)
        if lock is None:
            lock = self._locks[thread_id] = asyncio.Lock()
        async with lock, self.slots.hold(ctx.owner_id), self.graph.hold(ctx, thread_id, must_exist=must_exist) as lease:
            yield lease

    async def _reconcile(self, thread_id: str, owner_id: str) -> None:
        """Bring the approvals of ``owner_id``'s thread in line with its checkpoint and ledger (under its lease)."""
        for item in await self.graph.reconcile(thread_id, owner_id):
            _log.info("reconciled an approval of a turn that did not end cleanly: %s", item.status)

    async def recover_stale(self, *, limit: int = 100) -> int:
        """Take over the threads whose holder died, and bring each back in line; return how many.

        Run by the scheduler's tick: a process killed mid-turn leaves its thread as it was, its
        approvals open and its run open in the event log; taking it over (:meth:`graph.governed.
        GovernedGraph.take_over`) closes what cannot go on (nothing is left approved with nothing
        run, listed with nothing to resume, or running with nobody running it).
        """
        async with self.services.db.pool.connection() as conn, conn.transaction():
            await owner_scope.all_owners(conn)
            cur = await conn.execute(_STALE_SQL, (limit,))
            threads = [(str(r["thread_id"]), str(r["owner_id"])) for r in await cur.fetchall()]
        done = 0
        for thread_id, owner_id in threads:
            lease = await self.leases.try_acquire(thread_id)
            if lease is None:
                continue  # someone took it meanwhile, and takes it over
            try:
                with bound(lease):
                    for item in await self.graph.take_over(thread_id, owner_id):
                        _log.info("reconciled an approval of a turn that did not end cleanly: %s", item.status)
                done += 1
            finally:
                await self.leases.release(lease)
        return done

    # --- running ------------------------------------------------------------------------------

    def _prune_due(self, turn_id: str) -> bool:
        """Whether this finished turn should prune its thread's old checkpoints (about 1 in N)."""
        every = self.services.settings.checkpoint_prune_every
        if every <= 0 or not turn_id:
            return False
        return int(hashlib.sha256(turn_id.encode()).hexdigest()[:8], 16) % every == 0

    async def _run(self, ctx: Context, thread_id: str, graph_input: Any) -> AsyncIterator[TurnEvent]:
        """The graph run's events (a run that does not end cleanly is reconciled by the graph)."""
        last_turn = ""
        waiting = False
        async for chunk in self.graph.astream(
            graph_input, self._config(thread_id), context=ctx, stream_mode="custom", durability="exit"
        ):
            if isinstance(chunk, dict) and "tollgate_event" in chunk:
                event = TurnEvent(**chunk["tollgate_event"], thread_id=thread_id)
                last_turn = event["turn_id"]
                waiting = event["type"] == "approval_required"
                yield event
        if not waiting and self._prune_due(last_turn):
            await self.graph.checkpointer.aprune([thread_id], strategy="keep_latest")  # type: ignore[union-attr]

    async def stream(self, ctx: Context, thread_id: str, message: str) -> AsyncIterator[TurnEvent]:
        """Run a new turn with the user's ``message``; yields its events.

        Refused before anything runs: a message that is blank, too long or unstorable
        (``InvalidArgs``), a thread of another owner (``NotFound``), a run or inbox thread from
        chat (``ThreadReadOnly``).
        """
        if not isinstance(message, str) or not message.strip() or len(message) > _MAX_MESSAGE:
            raise InvalidArgs("chat", [f"message must be 1-{_MAX_MESSAGE} characters"])
        if unstorable(message):
            raise InvalidArgs("chat", ["message contains NUL or unpaired surrogate characters"])
        async with self._hold(ctx, thread_id, must_exist=False):
            async for event in self._run(ctx, thread_id, {"messages": [HumanMessage(content=message)]}):
                yield event

    async def stream_resume(self, ctx: Context, thread_id: str, value: Any) -> AsyncIterator[TurnEvent]:
        """Resume an interrupted turn with a raw value (``{"token": ..., "decisions": [...]}``, as Studio sends it)."""
        async for event in self._audited(ctx, thread_id, self._resume(ctx, thread_id, None, value)):
            yield event

    async def stream_decision(
        self, ctx: Context, approval_id: str, decision: dict[str, Any] | list[dict[str, Any]]
    ) -> AsyncIterator[TurnEvent]:
        """Decide an approval request by id, as its owner; yields the resumed turn's events.

        ``decision`` is one decision (for a request of one action) or a list, one per action of
        the request, in order; the id may be the request's or any of its actions'. An approval
        that is not pending (decided, superseded, expired, failed) is refused as such
        (``ApprovalInvalid``), a wrong count too, and the request stays pending; another owner's
        is indistinguishable from none (``NotFound``).
        """
        async with owner_scope.owner_reads(self.services.db.pool, ctx.owner_id) as conn:
            cur = await conn.execute(_APPROVAL_SQL, (approval_id, ctx.owner_id))
            row = await cur.fetchone()
        if row is None:
            raise NotFound("approval", approval_id)
        thread_id = str(row["thread_id"])
        if row["status"] not in approvals.OPEN_STATUSES:
            raise ApprovalInvalid(_closed(row))
        approval_id = str(row["request_id"])
        # Approved or executing with no turn running: its turn died. Taking the thread reconciles it.
        async for event in self._audited(ctx, thread_id, self._resume(ctx, thread_id, approval_id, decision)):
            yield event

    async def _resume(
        self, ctx: Context, thread_id: str, approval_id: str | None, value: Any
    ) -> AsyncIterator[TurnEvent]:
        """Under the thread's lease: check the decision against what the checkpoint waits on, then resume.

        ``approval_id`` given: ``value`` is one decision for that approval (the token is the
        server's). Otherwise ``value`` is a raw resume whose token names the approval.
        """
        async with self._hold(ctx, thread_id, must_exist=True):
            waiting = await self.graph.waiting(thread_id)
            if waiting is None:
                await self._reconcile(thread_id, ctx.owner_id)
                raise ApprovalInvalid("nothing is pending on this thread (already decided, superseded or never saved)")
            block = waiting.request["approval"]
            if approval_id is not None:
                if block["id"] != approval_id:
                    await self._reconcile(thread_id, ctx.owner_id)
                    raise ApprovalInvalid("this approval is no longer what its thread waits on")
                value = {"token": block["token"], "decisions": value if isinstance(value, list) else [value]}
            row = await self._approval(block["id"], ctx.owner_id)
            if row is None or row["status"] != "pending":
                raise ApprovalInvalid(_closed(row))
            self.graph.check_resume(self.services, ctx, thread_id, waiting, value)
            async for event in self._run(ctx, thread_id, Command(resume=value)):
                yield event

    async def _approval(self, approval_id: str, owner_id: str) -> dict[str, Any] | None:
        async with owner_scope.owner_reads(self.services.db.pool, owner_id) as conn:
            cur = await conn.execute(_APPROVAL_SQL, (approval_id, owner_id))
            return await cur.fetchone()

    async def _audited(self, ctx: Context, thread_id: str, events: AsyncIterator[TurnEvent]) -> AsyncIterator[TurnEvent]:
        """``events``; a refusal raised before the first one is audited once, then raised."""
        started = False
        try:
            async for event in events:
                started = True
                yield event
        except TollgateError as exc:
            if not started and not isinstance(exc, NotFound):
                why = getattr(exc, "reason", exc.code)
                # The record names the request the refused resume was for (the thread's own).
                waiting = await self.graph.waiting(thread_id) if thread_id else None
                block = waiting.request["approval"] if waiting is not None else None
                record = AuditRecord(owner_id=ctx.owner_id, stage="runner", decision="invalid", reason="resume_refused",
                                     code=exc.code, thread_id=thread_id[:200], detail={"why": str(why)[:200]},
                                     tool=block["tool"] if block else "", action=block["action"] if block else "",
                                     args_hash=block["args_hash"] if block else "")
                await append_audit(self.services.db.pool, record, now=self.services.clock())
            raise

    # --- collecting ---------------------------------------------------------------------------

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
                    actions=tuple(PendingAction(approval_id=a["approval_id"], tool=a["tool"], action=a["action"],
                                                preview=a["preview"], args=a["args"],
                                                allowed_decisions=tuple(a.get("allowed_decisions") or ()),
                                                provenance=dict(a.get("provenance") or {}),
                                                warnings=tuple(a.get("warnings") or ()))
                                  for a in d.get("actions") or ()),
                )
        return out

    async def send(self, ctx: Context, thread_id: str, message: str) -> TurnOutcome:
        """Run a new turn and collect its outcome."""
        return await self._collect(thread_id, self.stream(ctx, thread_id, message))

    async def resume(self, ctx: Context, thread_id: str, value: Any) -> TurnOutcome:
        """Resume with a raw value and collect the outcome."""
        return await self._collect(thread_id, self.stream_resume(ctx, thread_id, value))

    async def decide(
        self, ctx: Context, approval_id: str, decision: dict[str, Any] | list[dict[str, Any]]
    ) -> TurnOutcome:
        """Decide an approval by id and collect the outcome (its thread is the events')."""
        return await self._collect("", self.stream_decision(ctx, approval_id, decision))

    async def pending_approvals(self, ctx: Context, *, thread_id: str | None = None) -> list[PendingApproval]:
        """The caller's pending approvals that have not expired (of one thread, with ``thread_id``), newest first."""
        async with owner_scope.owner_reads(self.services.db.pool, ctx.owner_id) as conn:
            cur = await conn.execute(_PENDING_SQL, (ctx.owner_id, self.services.clock(), thread_id, thread_id))
            rows = await cur.fetchall()
        return [
            PendingApproval.of(r["thread_id"], r["request"], _preview_of(r["request"]), r["expires_at"].isoformat())
            for r in rows
        ]
