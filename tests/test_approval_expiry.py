"""Expiry is real: the scheduler's tick closes approvals past their expiry, audited, and says so."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest

from tollgate.graph.app import App, open_app
from tollgate.graph.background.api import create_run
from tollgate.graph.background.executor import Runtime
from tollgate.graph.background.expiry import expire_approvals
from tollgate.graph.background.worker import WorkerHandle, start_in_process_worker
from tollgate.graph.ledger.approval_contract import check_approvals
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store.db import Database
from tollgate.policies.errors import ApprovalInvalid
from tests.background_harness import count, run_row, wait_until
from tests.conftest import NOW, all_rows
from tests.fakes import ScriptedModel, call
from tests.harness import Clock
from tollgate.tools.demo import seed_demo

_MAIL = {"to": ["sam@example.com"], "subject": "Late", "body": "Ten minutes."}


@pytest.fixture
async def clocked(settings: Settings, db: Database) -> AsyncIterator[tuple[App, ScriptedModel, Clock, Context]]:
    clock = Clock(NOW)
    model = ScriptedModel(steps=[])
    owner = "o_" + secrets.token_hex(6)
    async with all_rows(db) as conn:
        await seed_demo(conn, owner, NOW, "Europe/Paris")
    async with open_app(settings, picker_model=model, clock=clock) as app:
        yield app, model, clock, Context(owner_id=owner, timezone="Europe/Paris")


async def test_an_expired_chat_approval_is_closed_audited_unlisted_and_the_thread_told(
    clocked: tuple[App, ScriptedModel, Clock, Context], db: Database
) -> None:
    app, model, clock, ctx = clocked
    thread = ctx.owner_id + "/expiry"
    model.push(call("mail__send", _MAIL))
    out = await app.runner.send(ctx, thread, "email sam")
    assert out.approval is not None
    approval_id = out.approval.approval_id

    clock.advance(days=4)  # past the three-day expiry
    assert await app.runner.pending_approvals(ctx) == []  # listings never show it, even before the tick
    assert await expire_approvals(Runtime(app=app)) >= 1
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT status, error_code FROM approvals WHERE approval_id = %s", (approval_id,))
        assert await cur.fetchone() == {"status": "expired", "error_code": "approval_expired"}
        cur = await conn.execute(
            "SELECT decision, reason, code, tool, action FROM audit_log WHERE owner_id = %s AND stage = 'approval'",
            (ctx.owner_id,))
        assert await cur.fetchall() == [{"decision": "expired", "reason": "expired", "code": "approval_expired",
                                         "tool": "mail", "action": "send"}]
        cur = await conn.execute(
            "SELECT content FROM transcript WHERE thread_id = %s AND turn_id = %s", (thread, f"expired:{approval_id}"))
        [notice] = await cur.fetchall()
    assert "expired" in notice["content"] and "did not run" in notice["content"]
    assert await expire_approvals(Runtime(app=app)) == 0  # closed once, told once
    assert await count(db, "SELECT count(*) FROM transcript WHERE thread_id = %s AND turn_id = %s",
                       thread, f"expired:{approval_id}") == 1
    with pytest.raises(ApprovalInvalid, match="already expired"):
        await app.runner.decide(ctx, approval_id, {"type": "approve"})
    assert await count(db, "SELECT count(*) FROM mail_outbox WHERE owner_id = %s", ctx.owner_id) == 0
    await check_approvals(db.pool, app.runner.graph, [thread])


async def test_a_background_run_waiting_on_an_expired_approval_fails_saying_so(
    bg_settings: Settings, db: Database
) -> None:
    clock = Clock(NOW)
    owner = "o_" + secrets.token_hex(6)
    async with all_rows(db) as conn:
        await seed_demo(conn, owner, NOW, "Europe/Paris")
    ctx = Context(owner_id=owner, timezone="Europe/Paris")
    async with open_app(bg_settings, clock=clock) as app:
        worker: WorkerHandle = await start_in_process_worker(app, concurrency=1)
        try:
            thread = ctx.owner_id + "/origin"
            await app.runner.send(ctx, thread, "what's on my calendar today?")
            run = await create_run(app, ctx, "add a task to buy oat milk", origin_thread_id=thread)

            async def waiting() -> bool:
                return (await run_row(db, run.run_id))["status"] == "awaiting_approval"

            await wait_until(waiting, what="the run to wait on its approval")
        finally:
            await worker.stop()
        clock.advance(days=4)
        assert await expire_approvals(Runtime(app=app)) >= 1
    row = await run_row(db, run.run_id)
    assert (row["status"], row["error_code"]) == ("failed", "approval_expired")
    assert "expired" in row["error"]
    delivered = await count(db, "SELECT count(*) FROM transcript WHERE thread_id = %s AND turn_id = %s",
                            thread, f"bg:{run.run_id}")
    assert delivered == 1
    assert await count(db, "SELECT count(*) FROM tasks WHERE owner_id = %s AND title ILIKE %s", owner, "%oat milk%") == 0
