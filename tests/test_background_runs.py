"""Background runs on one in-process worker: lifecycle, approval, cancel, delivery once, the service API."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import async_playwright, expect

from tollgate.graph.app import App, open_app
from tollgate.graph.background.api import (
    cancel_run,
    create_run,
    decide_background,
    get_run,
    list_runs,
    pause_run,
    unpause_run,
)
from tollgate.graph.background.delivery import deliver
from tollgate.graph.background.executor import WorkerHooks
from tollgate.graph.background.store import BackgroundRun
from tollgate.graph.background.worker import WorkerHandle, start_in_process_worker
from tollgate.graph.event_contract import EventContract
from tollgate.graph.events import TurnEvent
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store.db import Database
from tollgate.policies.errors import ApprovalInvalid, InvalidArgs, NotFound
from tests.background_harness import count, ledger_kinds, run_row, wait_until
from tests.conftest import all_rows
from tests.server_harness import Api, LiveServer
from tests.test_web_browser import _ARGS, _WAIT_MS, chromium  # noqa: F401 - fixture
from tests.test_web_page import _check

_cancel_on_first_decision: dict[str, Context] = {}
_pause_on_first_decision: dict[str, Context] = {}


async def _hook(run: BackgroundRun, event: TurnEvent) -> None:
    """Cancel or pause marked runs at their first planner decision (the owner pressing a button mid-run)."""
    if event["type"] != "planner_decision":
        return
    ctx = _cancel_on_first_decision.pop(run.instruction, None)
    if ctx is not None:
        assert _app is not None
        await cancel_run(_app, ctx, run.run_id)
    ctx = _pause_on_first_decision.pop(run.instruction, None)
    if ctx is not None:
        assert _app is not None
        await pause_run(_app, ctx, run.run_id)


_app: App | None = None


@pytest.fixture(scope="module")
async def bg_app(bg_settings: Settings, db: Database) -> AsyncIterator[App]:
    """A Tollgate app (offline picker) on the session database."""
    global _app
    async with open_app(bg_settings) as app:
        _app = app
        yield app
        _app = None


@pytest.fixture(scope="module")
async def worker(bg_app: App) -> AsyncIterator[WorkerHandle]:
    """One worker in this process (as ``make run`` starts it)."""
    handle = await start_in_process_worker(bg_app, concurrency=2, hooks=WorkerHooks(on_turn_event=_hook))
    yield handle
    await handle.stop()


def _ctx(owner: str) -> Context:
    return Context(owner_id=owner, timezone="Europe/Paris", channel="chat")


async def _chat_thread(app: App, ctx: Context) -> str:
    thread = f"{ctx.owner_id}/chat-{secrets.token_hex(3)}"
    out = await app.runner.send(ctx, thread, "what's on my calendar today?")
    assert out.outcome == "read"
    return thread


async def _final(db: Database, run_id: str, *statuses: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        row = await run_row(db, run_id)
        return row if row["status"] in statuses else None

    return await wait_until(check, what=f"run {run_id} to reach {statuses}")


async def _delivered(db: Database, thread: str, run_id: str) -> int:
    return await count(
        db, "SELECT count(*) FROM transcript WHERE thread_id = %s AND turn_id = %s", thread, f"bg:{run_id}"
    )


async def test_a_run_executes_its_turn_on_a_worker_and_delivers_the_result_once(
    bg_app: App, worker: WorkerHandle, db: Database, owner: str
) -> None:
    ctx = _ctx(owner)
    thread = await _chat_thread(bg_app, ctx)
    run = await create_run(bg_app, ctx, "what's on my calendar today?", origin_thread_id=thread)
    assert run.status == "queued" and run.thread_id == f"bg:{run.run_id}"

    row = await _final(db, run.run_id, "succeeded", "failed")
    assert row["status"] == "succeeded" and row["outcome"] == "read" and row["attempts"] == 1
    assert await ledger_kinds(db, run.run_id) == [
        "queued", "started", "turn:planner_decision", "turn:tool_start", "turn:tool_end", "turn:planner_decision",
        "turn:message_complete", "succeeded", "delivered",
    ]
    # The turn ran on its own thread as the owner; the result reached the chat thread once, message + event.
    assert await count(db, "SELECT count(*) FROM threads WHERE thread_id = %s AND owner_id = %s", run.thread_id, owner) == 1
    assert await _delivered(db, thread, run.run_id) == 1
    assert await count(
        db, "SELECT count(*) FROM turn_events WHERE thread_id = %s AND turn_id = %s AND type = 'message_complete'",
        thread, f"bg:{run.run_id}",
    ) == 1
    # Delivering again (a retried worker would) writes nothing.
    async with all_rows(db) as conn:
        again = await deliver(conn, owner_id=owner, thread_id=thread, key=f"bg:{run.run_id}", text="x", data={})
    assert again is False and await _delivered(db, thread, run.run_id) == 1

    detail = await get_run(bg_app, ctx, run.run_id)
    assert detail["status"] == "succeeded" and [e["kind"] for e in detail["events"]][:2] == ["queued", "started"]
    assert [r.run_id for r in await list_runs(bg_app, ctx)] == [run.run_id]


async def test_a_run_that_needs_approval_waits_and_a_decision_continues_it_on_a_worker(
    bg_app: App, worker: WorkerHandle, db: Database, owner: str
) -> None:
    ctx = _ctx(owner)
    thread = await _chat_thread(bg_app, ctx)
    run = await create_run(bg_app, ctx, "add a task to buy oat milk", origin_thread_id=thread)
    row = await _final(db, run.run_id, "awaiting_approval", "succeeded", "failed")
    assert row["status"] == "awaiting_approval"
    pending = await bg_app.runner.pending_approvals(ctx)
    assert [(p.thread_id, p.tool, p.action) for p in pending] == [(run.thread_id, "tasks", "create")]
    assert pending[0].approval_id == row["approval_id"]
    assert await count(db, "SELECT count(*) FROM tasks WHERE owner_id = %s", owner) == 0

    assert await decide_background(bg_app, ctx, pending[0].approval_id, {"type": "approve"}) == run.run_id
    with pytest.raises(ApprovalInvalid):  # one decision per approval
        await decide_background(bg_app, ctx, pending[0].approval_id, {"type": "approve"})

    row = await _final(db, run.run_id, "succeeded", "failed")
    assert row["status"] == "succeeded" and row["outcome"] == "executed"
    assert await count(db, "SELECT count(*) FROM tasks WHERE owner_id = %s AND title ILIKE %s", owner, "%oat milk%") == 1
    assert await count(db, "SELECT count(*) FROM effects WHERE idem_key = %s", pending[0].approval_id) == 1
    assert await _delivered(db, thread, run.run_id) == 1
    assert await bg_app.runner.pending_approvals(ctx) == []
    kinds = await ledger_kinds(db, run.run_id)
    assert kinds[kinds.index("awaiting_approval"):] == [
        "awaiting_approval", "decided", "resumed", "turn:approval_decided", "turn:tool_start", "turn:tool_end",
        "turn:planner_decision", "turn:message_complete", "succeeded", "delivered",
    ]
    # The recorded turn events keep the event contract across the pause.
    events = (await get_run(bg_app, ctx, run.run_id))["events"]
    turn = [TurnEvent(type=e["data"]["type"], seq=e["seq"], turn_id=e["turn_id"], ts=e["at"], data=e["data"]["data"])
            for e in events if e["kind"] == "turn"]
    split = next(i for i, e in enumerate(turn) if e["type"] == "approval_decided")
    contract = EventContract()
    contract.check_run(turn[:split])
    contract.check_run(turn[split:], resume=True)


async def test_a_rejected_background_approval_ends_the_run_without_writing(
    bg_app: App, worker: WorkerHandle, db: Database, owner: str
) -> None:
    ctx = _ctx(owner)
    run = await create_run(bg_app, ctx, "add a task to renew the car insurance")
    row = await _final(db, run.run_id, "awaiting_approval", "succeeded", "failed")
    await decide_background(bg_app, ctx, row["approval_id"], {"type": "reject", "message": "not now"})
    row = await _final(db, run.run_id, "succeeded", "failed")
    assert row["outcome"] == "rejected" and "won't" in row["reply"]
    assert await count(db, "SELECT count(*) FROM tasks WHERE owner_id = %s", owner) == 0
    # With no origin thread, the result goes to the owner's notice thread.
    assert await count(
        db, "SELECT count(*) FROM transcript t JOIN threads h USING (thread_id) WHERE h.owner_id = %s AND t.turn_id = %s"
        " AND t.thread_id LIKE 'inbox:%%'", owner, f"bg:{run.run_id}",
    ) == 1


async def test_cancel_stops_a_running_run_at_the_next_step_boundary(
    bg_app: App, worker: WorkerHandle, db: Database, owner: str
) -> None:
    ctx = _ctx(owner)
    instruction = f"add a task to call the plumber ({owner})"
    _cancel_on_first_decision[instruction] = ctx
    run = await create_run(bg_app, ctx, instruction)
    row = await _final(db, run.run_id, "cancelled", "succeeded", "awaiting_approval", "failed")
    assert row["status"] == "cancelled" and row["cancel_requested"] is True
    kinds = await ledger_kinds(db, run.run_id)
    assert kinds[-3:] == ["cancel_requested", "turn:planner_decision", "cancelled"]
    assert "turn:approval_required" not in kinds  # it stopped before the next step
    assert await bg_app.runner.pending_approvals(ctx) == []


async def test_pause_stops_a_running_run_at_the_next_step_and_resume_finishes_it_once(
    bg_app: App, worker: WorkerHandle, db: Database, owner: str
) -> None:
    ctx = _ctx(owner)
    instruction = f"what's on my calendar today? ({owner})"
    _pause_on_first_decision[instruction] = ctx
    run = await create_run(bg_app, ctx, instruction)
    row = await _final(db, run.run_id, "paused", "succeeded", "failed", "cancelled")
    assert row["status"] == "paused" and row["pause_requested"] is False
    kinds = await ledger_kinds(db, run.run_id)
    assert kinds[-3:] == ["pause_requested", "turn:planner_decision", "paused"]
    assert "turn:tool_start" not in kinds  # it stopped before the next step
    assert (await pause_run(bg_app, ctx, run.run_id)).status == "paused"  # pausing again changes nothing
    resumed = await unpause_run(bg_app, ctx, run.run_id)
    assert resumed.status in ("queued", "running", "succeeded")
    row = await _final(db, run.run_id, "succeeded", "failed", "cancelled")
    assert row["status"] == "succeeded"
    assert (await ledger_kinds(db, run.run_id)).count("delivered") == 1


async def test_a_paused_run_can_be_cancelled_and_others_do_not_pause(
    bg_app: App, worker: WorkerHandle, db: Database, owner: str
) -> None:
    ctx = _ctx(owner)
    instruction = f"what's on my calendar tomorrow? ({owner})"
    _pause_on_first_decision[instruction] = ctx
    run = await create_run(bg_app, ctx, instruction)
    await _final(db, run.run_id, "paused", "succeeded", "failed")
    assert (await cancel_run(bg_app, ctx, run.run_id)).status == "cancelled"
    assert (await unpause_run(bg_app, ctx, run.run_id)).status == "cancelled"  # final runs stay as they are
    with pytest.raises(NotFound):
        await pause_run(bg_app, _ctx(owner + "x"), run.run_id)


async def test_cancel_of_a_waiting_run_clears_its_approval(
    bg_app: App, worker: WorkerHandle, db: Database, owner: str
) -> None:
    ctx = _ctx(owner)
    run = await create_run(bg_app, ctx, "add a task to water the plants")
    row = await _final(db, run.run_id, "awaiting_approval", "failed")
    done = await cancel_run(bg_app, ctx, run.run_id)
    assert done.status == "cancelled"
    assert await bg_app.runner.pending_approvals(ctx) == []
    with pytest.raises(ApprovalInvalid):
        await decide_background(bg_app, ctx, row["approval_id"], {"type": "approve"})
    assert (await cancel_run(bg_app, ctx, run.run_id)).status == "cancelled"  # final runs stay as they are


async def test_runs_are_owner_scoped_and_inputs_are_checked(bg_app: App, db: Database, owner: str) -> None:
    ctx, other = _ctx(owner), _ctx(owner + "x")
    thread = await _chat_thread(bg_app, other)
    with pytest.raises(NotFound):  # another owner's thread is not a destination
        await create_run(bg_app, ctx, "what's on my calendar today?", origin_thread_id=thread)
    with pytest.raises(InvalidArgs):
        await create_run(bg_app, ctx, "   ")
    with pytest.raises(InvalidArgs):
        await create_run(bg_app, ctx, "hello\x00there")
    run = await create_run(bg_app, other, "what's on my calendar today?")
    with pytest.raises(NotFound):
        await get_run(bg_app, ctx, run.run_id)
    with pytest.raises(NotFound):
        await cancel_run(bg_app, ctx, run.run_id)
    assert await list_runs(bg_app, ctx) == []
    # A chat approval is not a background one; a malformed decision is refused before anything.
    out = await bg_app.runner.send(ctx, owner + "/chat-approval", "add a task to buy bread")
    assert out.approval is not None
    with pytest.raises(NotFound):
        await decide_background(bg_app, ctx, out.approval.approval_id, {"type": "approve"})
    with pytest.raises(ApprovalInvalid):
        await decide_background(bg_app, ctx, out.approval.approval_id, {"type": "yes please"})
    await cancel_run(bg_app, other, run.run_id)


async def test_over_http_a_background_run_is_queued_approved_completed_and_delivered_once(
    api: Api, bg_app: App, worker: WorkerHandle, db: Database
) -> None:
    listed = await api.chat("what's on my calendar today?")
    thread = listed.last["thread_id"]
    created = await api.client.post(
        "/v1/background-runs", json={"instruction": "add a task to order printer paper", "thread_id": thread},
        headers=api.auth,
    )
    assert created.status_code == 202, created.text
    run_id = created.json()["run_id"]
    assert created.json()["status"] == "queued" and created.json()["origin_thread_id"] == thread

    async def status_is(*wanted: str) -> dict[str, Any] | None:
        got = await api.get(f"/v1/background-runs/{run_id}")
        assert got.status_code == 200, got.text
        return got.json() if got.json()["status"] in wanted else None

    waiting = await wait_until(lambda: status_is("awaiting_approval", "failed"), what="the run to wait")
    approvals = (await api.get("/v1/approvals")).json()["approvals"]
    mine = [a for a in approvals if a["thread_id"] == f"bg:{run_id}"]
    assert [a["approval_id"] for a in mine] == [waiting["approval_id"]] and mine[0]["action"] == "create"

    decided = await api.client.post(
        f"/v1/approvals/{waiting['approval_id']}/decision", json={"type": "approve"}, headers=api.auth
    )
    assert decided.status_code == 202 and decided.json() == {"run_id": run_id, "status": "queued"}
    again = await api.client.post(
        f"/v1/approvals/{waiting['approval_id']}/decision", json={"type": "approve"}, headers=api.auth
    )
    assert again.status_code == 409

    done = await wait_until(lambda: status_is("succeeded", "failed"), what="the run to finish")
    assert done["status"] == "succeeded" and done["outcome"] == "executed"
    assert [e["kind"] for e in done["events"]][-2:] == ["succeeded", "delivered"]
    assert await count(db, "SELECT count(*) FROM tasks WHERE owner_id = %s AND title ILIKE %s", api.owner,
                       "%printer paper%") == 1
    assert await count(db, "SELECT count(*) FROM transcript WHERE thread_id = %s AND turn_id = %s",
                       thread, f"bg:{run_id}") == 1
    runs = (await api.get("/v1/background-runs")).json()["runs"]
    assert [r["run_id"] for r in runs] == [run_id]
    cancelled = await api.client.post(f"/v1/background-runs/{run_id}/cancel", headers=api.auth)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "succeeded"  # final runs stay final


async def test_over_http_runs_are_owner_scoped_and_validated(api: Api, bg_app: App, db: Database) -> None:
    other = _ctx(api.owner + "x")
    theirs = await create_run(bg_app, other, "what's on my calendar today?")
    assert (await api.get(f"/v1/background-runs/{theirs.run_id}")).status_code == 404
    assert (await api.client.post(f"/v1/background-runs/{theirs.run_id}/cancel", headers=api.auth)).status_code == 404
    assert (await api.get("/v1/background-runs/not-a-run")).status_code == 422
    blank = await api.client.post("/v1/background-runs", json={"instruction": "  "}, headers=api.auth)
    assert blank.status_code == 422
    foreign_thread = await api.client.post(
        "/v1/background-runs", json={"instruction": "hi", "thread_id": "bg:" + theirs.run_id}, headers=api.auth
    )
    assert foreign_thread.status_code == 404
    assert (await api.client.get("/v1/background-runs")).status_code == 401
    await cancel_run(bg_app, other, theirs.run_id)


async def test_on_the_page_a_background_runs_approval_links_to_its_run_and_the_inbox_with_its_result(
    api: Api, live_server: LiveServer, bg_app: App, worker: WorkerHandle, chromium: Path, tmp_path: Path
) -> None:
    created = await api.client.post("/v1/background-runs", json={"instruction": "add a task to order printer paper"},
                                    headers=api.auth)  # no thread: its result goes to the inbox
    run_id = created.json()["run_id"]

    async def waiting() -> bool | None:
        return (await api.get(f"/v1/background-runs/{run_id}")).json()["status"] == "awaiting_approval" or None

    await wait_until(waiting, what="the run to wait for its approval")
    async with async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(  # bypass_csp: only to inject axe for the check
            str(tmp_path / "profile"), executable_path=str(chromium), headless=True, args=_ARGS, bypass_csp=True)
        try:
            page = context.pages[0] if context.pages else await context.new_page()
            await page.goto(f"{live_server.url}/#token={api.token}")
            await expect(page.locator("#approvals li button")).to_have_count(1, timeout=_WAIT_MS)
            await page.locator("#approvals li button").click()  # opens the run's thread, listed under Runs
            await expect(page.locator('.kind[data-kind="run"]')).to_have_attribute("aria-pressed", "true")
            chip = page.locator(".chip").last
            await expect(chip.locator(".chip-preview")).to_contain_text("printer paper", timeout=_WAIT_MS)
            await expect(page.locator("#composer")).to_be_hidden()  # the run's thread is the server's
            await _check(page, "desktop-background-run")
            await chip.locator("button.approve").click()
            await expect(chip.locator(".chip-state")).to_contain_text("its result lands in your inbox", timeout=_WAIT_MS)

            # Once the worker is done, the card that approved it shows the run's result.
            await expect(chip.locator(".run-result")).to_contain_text("succeeded", timeout=_WAIT_MS)
            await expect(chip.locator(".run-result .bubble")).to_contain_text("printer paper")
            await chip.locator(".run-links button", has_text="Open the inbox").click()
            await expect(page.locator('.kind[data-kind="inbox"]')).to_have_attribute("aria-pressed", "true")
            await expect(page.locator(".msg.assistant .bubble").last).to_contain_text("printer paper", timeout=_WAIT_MS)
            await _check(page, "desktop-inbox")
        finally:
            await context.close()
