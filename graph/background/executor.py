"""Driving a run: the same graph, on thread ``bg:<run_id>``, as the owner, on channel ``background``.

A worker job calls :func:`start_run` (a new turn with the run's instruction) or
:func:`resume_run` (an approval decision). Both consume the runner's event stream, record each
event in the run's ledger and, at every step boundary (a planner decision, a tool's end),
check whether the owner asked to cancel; if so the turn is abandoned there.

A retried job first reads the thread's checkpoint: a turn that already finished is finalized
from it and an approval that is still pending is waited on, so a crash between the turn and
its bookkeeping never runs the turn twice. A crash *inside* the turn replays it; approved
writes are keyed by their approval id in the core's idempotency ledger, so nothing is written
twice. The result is delivered to the origin thread once (:mod:`graph.background.delivery`).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from tollgate.graph.app import App
from tollgate.graph.background.delivery import deliver
from tollgate.graph.background.queue import MAX_ATTEMPTS
from tollgate.graph.background.store import BackgroundRun, add_event, load_run, transition
from tollgate.graph.events import TurnEvent
from tollgate.graph.ledger.approvals import requested, supersede
from tollgate.graph.state import Context
from tollgate.graph.store import owner_scope
from tollgate.graph.store.leases import LeaseLost
from tollgate.policies.hitl import decision_kind
from tollgate.policies.errors import ApprovalInvalid, ErrorCode, TollgateError

__all__ = ["RunLost", "Runtime", "WorkerHooks", "fail_run", "resume_run", "start_run"]

_STEP_BOUNDARIES: Final = frozenset({"planner_decision", "tool_end"})


class RunLost(TollgateError):
    """This worker's attempt is no longer the run's current one (it stalled and another took over)."""

    code: ErrorCode = "unavailable"

    def __init__(self, run_id: str, attempt: int) -> None:
        self.run_id = run_id
        self.attempt = attempt
        super().__init__(f"attempt {attempt} of run {run_id!r} was taken over; it stops here")


async def _current(rt: Runtime, run_id: str, attempt: int) -> bool:
    """Whether ``attempt`` is still the run's current attempt."""
    async with rt.app.services.db.pool.connection() as conn:
        cur = await conn.execute("SELECT attempts FROM background_runs WHERE run_id = %s", (run_id,))
        row = await cur.fetchone()
    return row is not None and int(row["attempts"]) == attempt


@dataclass(frozen=True, slots=True)
class WorkerHooks:
    """Observation points of a worker (fault-injection tests use them; no behaviour of their own)."""

    on_turn_event: Callable[[BackgroundRun, TurnEvent], Awaitable[None] | None] | None = None
    """Called (and awaited, if it returns an awaitable) with every turn event of a run, before it is recorded."""


@dataclass(frozen=True, slots=True)
class Runtime:
    """What a worker's jobs run with."""

    app: App
    """The Tollgate app whose runner drives background turns (background step budget)."""
    hooks: WorkerHooks = WorkerHooks()
    """Observation hooks."""
    stall_seconds: float = 30.0
    """A worker silent this long is presumed dead."""


@dataclass
class _Drive:
    reply: str | None = None
    outcome: str | None = None
    approval_id: str | None = None
    cancelled: bool = False
    paused: bool = False


def _ctx(run: BackgroundRun) -> Context:
    return Context(owner_id=run.owner_id, timezone=run.timezone, channel="background")


async def _stop_requested(rt: Runtime, run_id: str) -> tuple[bool, bool]:
    """(cancel requested, pause requested) for the run, read between steps."""
    async with rt.app.services.db.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT cancel_requested, pause_requested FROM background_runs WHERE run_id = %s", (run_id,)
        )
        row = await cur.fetchone()
    return (bool(row and row["cancel_requested"]), bool(row and row["pause_requested"]))


async def _drive(
    rt: Runtime, run: BackgroundRun, events: AsyncIterator[TurnEvent], attempt: int, *, pausable: bool = True
) -> _Drive:
    """Follow a turn's events into the run's ledger, stopping at a step boundary on cancel or pause.

    A paused turn is abandoned before its next step; with ``durability="exit"`` nothing of it was
    checkpointed, so resuming runs the instruction again: its reads repeat, and a write would
    stop at an approval as before. A turn that continues an approval is not pausable: its
    decision has been taken and must run to the end.
    """
    out = _Drive()
    try:
        async for event in events:
            if rt.hooks.on_turn_event is not None:
                seen = rt.hooks.on_turn_event(run, event)
                if inspect.isawaitable(seen):
                    await seen
            async with rt.app.services.db.pool.connection() as conn:
                recorded = await add_event(
                    conn, run.run_id, "turn", attempt=attempt, turn_id=event["turn_id"], seq=event["seq"],
                    data={"type": event["type"], "data": event["data"]},
                )
            if not recorded and not await _current(rt, run.run_id, attempt):
                raise RunLost(run.run_id, attempt)
            if event["type"] == "message_complete":
                out.reply = str(event["data"].get("text", ""))
                out.outcome = str(event["data"].get("outcome", ""))
            elif event["type"] == "approval_required":
                out.approval_id = str(event["data"]["approval_id"])
            elif event["type"] in _STEP_BOUNDARIES:
                cancel, pause = await _stop_requested(rt, run.run_id)
                if cancel or (pause and pausable):
                    out.cancelled, out.paused = cancel, not cancel
                    break
    finally:
        # Abandoning the turn early must release the runner's thread lock now, not at GC.
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()
    return out


async def _clear_approvals(conn: Any, run: BackgroundRun) -> None:
    """In the caller's transaction: close any approval of the run's thread still pending (a stale
    ask after a crash or cancel)."""
    await owner_scope.scope(conn, run.owner_id)
    await supersede(conn, run.thread_id, run.owner_id)


async def _finish(rt: Runtime, run: BackgroundRun, result: _Drive, attempt: int, decided: str | None = None) -> None:
    """Record what the turn ended with; deliver a finished run's result once."""
    async with rt.app.services.db.pool.connection() as conn, conn.transaction():
        if result.cancelled:
            done = await transition(conn, run.run_id, from_=("running",), to="cancelled", attempt=attempt)
            if done is not None:
                await _clear_approvals(conn, run)
                await add_event(conn, run.run_id, "cancelled", attempt=attempt, data={"at": "step boundary"})
            return
        if result.paused:
            done = await transition(conn, run.run_id, from_=("running",), to="paused", attempt=attempt,
                                    pause_requested=False)
            if done is not None:
                await add_event(conn, run.run_id, "paused", attempt=attempt, data={"at": "step boundary"})
            return
        if result.approval_id is not None:
            waiting = await transition(
                conn, run.run_id, from_=("running",), to="awaiting_approval", attempt=attempt,
                approval_id=result.approval_id,
            )
            if waiting is not None:
                await add_event(conn, run.run_id, "awaiting_approval", attempt=attempt,
                                data={"approval_id": result.approval_id})
            return
        done = await transition(
            conn, run.run_id, from_=("running",), to="succeeded", attempt=attempt, reply=result.reply or "",
            outcome=result.outcome,
        )
        if done is None:
            return
        await _clear_approvals(conn, run)
        await add_event(conn, run.run_id, "succeeded", attempt=attempt, data={"outcome": result.outcome})
        text = f"Background run “{run.title}” finished.\n\n{result.reply or ''}".rstrip()
        if await deliver(conn, owner_id=run.owner_id, thread_id=run.origin_thread_id, key=f"bg:{run.run_id}",
                         text=text, data={"background_run_id": run.run_id, "status": "succeeded"}):
            await add_event(conn, run.run_id, "delivered", attempt=attempt, data={"thread_id": run.origin_thread_id})


async def fail_run(rt: Runtime, run_id: str, *, code: str, message: str, attempt: int = 0) -> bool:
    """Fail a run that is not final yet, clear its pending approval, tell the origin thread once.

    ``attempt`` > 0: only while that is the run's current attempt (a worker that lost its run
    cannot fail it); 0: whatever the attempt (the scheduler, the owner, expiry).
    """
    async with rt.app.services.db.pool.connection() as conn, conn.transaction():
        run = await transition(
            conn, run_id, from_=("queued", "running", "awaiting_approval"), to="failed",
            attempt=attempt or None, error_code=code, error=message,
        )
        if run is None:
            return False
        await _clear_approvals(conn, run)
        await add_event(conn, run_id, "failed", attempt=attempt, data={"code": code, "error": message})
        text = f"Background run “{run.title}” failed: {message}"
        if await deliver(conn, owner_id=run.owner_id, thread_id=run.origin_thread_id, key=f"bg:{run_id}",
                         text=text, data={"background_run_id": run_id, "status": "failed"}):
            await add_event(conn, run_id, "delivered", attempt=attempt, data={"thread_id": run.origin_thread_id})
    return True


async def _checkpoint(rt: Runtime, run: BackgroundRun) -> tuple[str | None, dict[str, Any]]:
    """The approval the thread is interrupted on (if any) and the thread's state values."""
    snapshot = await rt.app.runner.graph.aget_state({"configurable": {"thread_id": run.thread_id}})
    request = requested(snapshot)
    return (request["approval"]["id"] if request is not None else None), dict(snapshot.values or {})


def _finished(values: dict[str, Any]) -> _Drive | None:
    if values.get("turn_id") and values.get("reply"):
        return _Drive(reply=str(values["reply"]), outcome=str(values.get("outcome", "reply")))
    return None


async def _begin(rt: Runtime, run_id: str, job_attempt: int, kind: str) -> BackgroundRun | None:
    """Mark the run running for this attempt; ``None`` when the job is stale or out of attempts."""
    if job_attempt >= MAX_ATTEMPTS:  # a stalled job retried once too often: give up honestly
        await fail_run(rt, run_id, code="unavailable", message=_gave_up())
        return None
    async with rt.app.services.db.pool.connection() as conn, conn.transaction():
        run = await load_run(conn, run_id)
        if run is None or run.status not in ("queued", "running"):
            return None  # cancelled, finished, or waiting: this job has nothing to do
        run = await transition(conn, run_id, from_=("queued", "running"), to="running", attempts_plus=True)
        if run is not None:
            await add_event(conn, run_id, kind if job_attempt == 0 else "retried", attempt=run.attempts,
                            data={"job_attempt": job_attempt + 1, "pid": os.getpid()})
        return run


def _gave_up() -> str:
    return f"gave up after {MAX_ATTEMPTS} attempts: the worker running it stopped each time before it finished"


async def _guarded(rt: Runtime, run: BackgroundRun, job_attempt: int, body: Callable[[], Any]) -> None:
    """Run ``body``; a typed refusal fails the run, anything else is retried until attempts run out.

    A worker that lost its run (its attempt is no longer the run's, or its thread's lease was
    taken by its successor) stops there: the successor owns the run.
    """
    try:
        await body()
    except (RunLost, LeaseLost):
        return
    except TollgateError as exc:
        await fail_run(rt, run.run_id, code=exc.code, message=exc.message, attempt=run.attempts)
    except Exception as exc:
        if job_attempt + 1 >= MAX_ATTEMPTS:
            await fail_run(
                rt, run.run_id, code="unavailable", attempt=run.attempts,
                message=f"failed {MAX_ATTEMPTS} times (last error: {type(exc).__name__})",
            )
            return
        async with rt.app.services.db.pool.connection() as conn:
            await add_event(conn, run.run_id, "attempt_failed", attempt=run.attempts,
                            data={"error": type(exc).__name__})
        raise


async def start_run(rt: Runtime, run_id: str, *, job_attempt: int) -> None:
    """Run the run's turn (or, on a retry, pick up what the previous attempt left)."""
    run = await _begin(rt, run_id, job_attempt, "started")
    if run is None:
        return

    async def body() -> None:
        pending, values = await _checkpoint(rt, run)
        finished = _finished(values) if pending is None else None
        if finished is not None:
            await _finish(rt, run, finished, run.attempts)
            return
        if pending is not None and await _approval_pending(rt, run, pending):
            await _finish(rt, run, _Drive(approval_id=pending), run.attempts)
            return
        result = await _drive(rt, run, rt.app.runner.stream(_ctx(run), run.thread_id, run.instruction), run.attempts)
        await _finish(rt, run, result, run.attempts)

    await _guarded(rt, run, job_attempt, body)


async def resume_run(
    rt: Runtime, run_id: str, approval_id: str, decision: dict[str, Any] | list[dict[str, Any]], *, job_attempt: int
) -> None:
    """Continue a run with the owner's decision (one per action of its request) on its approval."""
    kind = decision_kind([str(d.get("type")) for d in (decision if isinstance(decision, list) else [decision])])
    run = await _begin(rt, run_id, job_attempt, "resumed")
    if run is None:
        return

    async def body() -> None:
        pending, values = await _checkpoint(rt, run)
        if pending == approval_id:
            events = rt.app.runner.stream_decision(_ctx(run), approval_id, decision)
            result = await _drive(rt, run, events, run.attempts, pausable=False)
            await _finish(rt, run, result, run.attempts, kind)
            return
        finished = _finished(values) if pending is None else None
        if finished is None:
            raise ApprovalInvalid("the run's approval is no longer pending")
        await _finish(rt, run, finished, run.attempts, kind)

    await _guarded(rt, run, job_attempt, body)


async def _approval_pending(rt: Runtime, run: BackgroundRun, approval_id: str) -> bool:
    async with owner_scope.owner_reads(rt.app.services.db.pool, run.owner_id) as conn:
        cur = await conn.execute(
            "SELECT 1 FROM approvals WHERE approval_id = %s AND owner_id = %s AND status = 'pending'",
            (approval_id, run.owner_id),
        )
        return await cur.fetchone() is not None
