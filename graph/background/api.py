"""The background-runs service: what the HTTP routes (and tests, and the CLI) call.

Every function takes the app and the caller's :class:`~graph.state.Context`; the owner comes from
there and nowhere else, and another owner's run or approval is indistinguishable from none.
State changes and job deferrals commit in one transaction.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from psycopg import AsyncConnection
from pydantic import TypeAdapter, ValidationError

from tollgate.graph.app import App
from tollgate.graph.background.queue import RUN_DECIDE, RUN_START, defer_run_job, ensure_queue_schema
from tollgate.graph.store import owner_scope
from tollgate.graph.background.store import (
    BackgroundRun,
    RunStatus,
    add_event,
    ensure_inbox,
    insert_run,
    load_run,
    new_run_id,
    run_events,
    transition,
)
from tollgate.graph.background.store import list_runs as _list_runs
from tollgate.graph.state import Context
from tollgate.policies.errors import ApprovalInvalid, InvalidArgs, NotFound
from tollgate.policies.hitl import MAX_ACTIONS, Decision, decision_kind
from tollgate.policies.storable import unstorable
from tollgate.tools._render import clip

__all__ = [
    "cancel_run", "create_run", "decide_background", "get_run", "list_runs", "pause_run", "queue_run", "unpause_run",
]

_MAX_INSTRUCTION: Final = 8000
_DECISION: Final = TypeAdapter(Decision)


def _check_instruction(instruction: object) -> str:
    """The same rules as a chat message: the instruction runs as one."""
    if not isinstance(instruction, str) or not instruction.strip() or len(instruction) > _MAX_INSTRUCTION:
        raise InvalidArgs("background_runs", [f"instruction must be 1-{_MAX_INSTRUCTION} characters"])
    if unstorable(instruction):
        raise InvalidArgs("background_runs", ["instruction contains NUL or unpaired surrogate characters"])
    return instruction.strip()


async def queue_run(
    app: App, conn: Any, ctx: Context, instruction: str, *, origin_thread_id: str | None, source: str,
    run_id: str | None = None, title: str | None = None,
) -> BackgroundRun | None:
    """Insert a queued run and defer its job on ``conn`` (the caller's transaction); ``None`` if ``run_id`` exists."""
    if origin_thread_id is None:
        origin_thread_id = await ensure_inbox(conn, app.services.key(), ctx.owner_id)
    else:
        cur = await conn.execute("SELECT owner_id FROM threads WHERE thread_id = %s", (origin_thread_id,))
        row = await cur.fetchone()
        if row is None or row["owner_id"] != ctx.owner_id or origin_thread_id.startswith("bg:"):
            raise NotFound("thread", origin_thread_id)
    run = await insert_run(
        conn,
        run_id=run_id or new_run_id(),
        owner_id=ctx.owner_id,
        source="offer" if source == "offer" else "api",
        title=title or clip(instruction, 120),
        instruction=instruction,
        timezone=ctx.timezone,
        origin_thread_id=origin_thread_id,
    )
    if run is not None:
        await defer_run_job(conn, RUN_START, run_id=run.run_id, owner_id=ctx.owner_id)
    return run


async def create_run(app: App, ctx: Context, instruction: str, *, origin_thread_id: str | None = None) -> BackgroundRun:
    """Queue a background run of ``instruction``; its result goes to ``origin_thread_id`` (default: the owner's notice thread)."""
    text = _check_instruction(instruction)
    await ensure_queue_schema(app.services.db)
    async with app.services.db.pool.connection() as conn, conn.transaction():
        run = await queue_run(app, conn, ctx, text, origin_thread_id=origin_thread_id, source="api")
    assert run is not None  # a fresh random id
    return run


async def list_runs(app: App, ctx: Context, *, status: RunStatus | None = None, limit: int = 50) -> list[BackgroundRun]:
    """The caller's runs, newest first."""
    async with app.services.db.pool.connection() as conn:
        return await _list_runs(conn, ctx.owner_id, status=status, limit=max(1, min(limit, 200)))


async def _owned_run(conn: AsyncConnection[Any], ctx: Context, run_id: str) -> BackgroundRun:
    """The caller's run, or :class:`NotFound` (another owner's looks the same as none)."""
    run = await load_run(conn, run_id, ctx.owner_id)
    if run is None:
        raise NotFound("background_run", run_id)
    return run


async def _ask_running(
    conn: AsyncConnection[Any], run: BackgroundRun, flag: Literal["cancel_requested", "pause_requested"]
) -> BackgroundRun:
    """Flag a running run for its worker to honour at the next step boundary; other runs stay as they are."""
    flagged = await transition(conn, run.run_id, from_=("running",), to="running", **{flag: True})
    if flagged is None:
        return run
    await add_event(conn, run.run_id, flag, data={"by": "owner"})
    return flagged


async def get_run(app: App, ctx: Context, run_id: str) -> dict[str, Any]:
    """One of the caller's runs with its event ledger (``events``)."""
    async with app.services.db.pool.connection() as conn:
        run = await _owned_run(conn, ctx, run_id)
        return run.to_dict() | {"events": await run_events(conn, run_id)}


async def cancel_run(app: App, ctx: Context, run_id: str) -> BackgroundRun:
    """Cancel a run: queued, paused or waiting ones at once, a running one at its next step boundary; final ones stay as they are."""
    async with owner_scope.owner_transaction(app.services.db.pool, ctx.owner_id) as conn:
        run = await _owned_run(conn, ctx, run_id)
        done = await transition(conn, run_id, from_=("queued", "paused", "awaiting_approval"), to="cancelled")
        if done is not None:
            await conn.execute(
                """UPDATE approvals SET status = 'superseded', decided_at = now()
                   WHERE thread_id = %s AND owner_id = %s AND status = 'pending'""",
                (run.thread_id, ctx.owner_id),
            )
            await add_event(conn, run_id, "cancelled", data={"by": "owner"})
            return done
        return await _ask_running(conn, run, "cancel_requested")


async def pause_run(app: App, ctx: Context, run_id: str) -> BackgroundRun:
    """Pause a run: a queued one at once, a running one at its next step boundary.

    A run waiting on an approval is already paused in effect; final runs stay as they are.
    """
    async with app.services.db.pool.connection() as conn, conn.transaction():
        run = await _owned_run(conn, ctx, run_id)
        done = await transition(conn, run_id, from_=("queued",), to="paused")
        if done is not None:
            await add_event(conn, run_id, "paused", data={"by": "owner"})
            return done
        return await _ask_running(conn, run, "pause_requested")


async def unpause_run(app: App, ctx: Context, run_id: str) -> BackgroundRun:
    """Queue a paused run again (a pause still pending on a running run is withdrawn)."""
    await ensure_queue_schema(app.services.db)
    async with app.services.db.pool.connection() as conn, conn.transaction():
        run = await _owned_run(conn, ctx, run_id)
        moved = await transition(conn, run_id, from_=("paused",), to="queued")
        if moved is not None:
            await add_event(conn, run_id, "resumed_by_owner", data={"by": "owner"})
            await defer_run_job(conn, RUN_START, run_id=run_id, owner_id=ctx.owner_id)
            return moved
        withdrawn = await transition(conn, run_id, from_=("running",), to="running", pause_requested=False)
        return withdrawn or run


async def decide_background(
    app: App, ctx: Context, approval_id: str, decision: dict[str, Any] | list[dict[str, Any]]
) -> str:
    """Decide the approval a background run waits on; a worker continues the run. Returns the run id.

    The decision is checked for shape here; the token, expiry and arguments are checked by the
    graph on the worker, exactly as for a chat approval. Deciding twice is refused.
    """
    try:
        checked = [_DECISION.validate_python(d) for d in (decision if isinstance(decision, list) else [decision])]
    except ValidationError:
        raise ApprovalInvalid("malformed decision") from None
    if not 1 <= len(checked) <= MAX_ACTIONS:
        raise ApprovalInvalid("malformed decision")
    await ensure_queue_schema(app.services.db)
    async with owner_scope.owner_transaction(app.services.db.pool, ctx.owner_id) as conn:
        cur = await conn.execute(
            "SELECT thread_id, status FROM approvals WHERE approval_id = %s AND owner_id = %s FOR UPDATE",
            (approval_id, ctx.owner_id),
        )
        row = await cur.fetchone()
        if row is None or not str(row["thread_id"]).startswith("bg:"):
            raise NotFound("approval", approval_id)
        if row["status"] != "pending":
            raise ApprovalInvalid(f"approval already {row['status']}")
        run_id = str(row["thread_id"])[3:]
        run = await load_run(conn, run_id, ctx.owner_id)
        if run is None or run.status != "awaiting_approval" or run.approval_id != approval_id:
            raise ApprovalInvalid("the run is not waiting on this approval")
        moved = await transition(conn, run_id, from_=("awaiting_approval",), to="queued")
        if moved is None:
            raise ApprovalInvalid("the run is not waiting on this approval")
        kinds = [c.type for c in checked]
        await add_event(conn, run_id, "decided", data={"approval_id": approval_id, "decision": decision_kind(kinds)})
        dumped = [c.model_dump(mode="json", exclude_none=True) for c in checked]
        await defer_run_job(
            conn, RUN_DECIDE, run_id=run_id, owner_id=ctx.owner_id, approval_id=approval_id,
            decision=dumped if isinstance(decision, list) else dumped[0],
        )
    return run_id
