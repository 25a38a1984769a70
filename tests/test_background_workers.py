"""Real worker processes on one database: exactly once, one run per owner at a time, crashes, reminders."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta

import pytest

from tollgate.graph.app import App, open_app
from tollgate.graph.background.api import create_run
from tollgate.graph.background.store import ledger_summaries
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store.db import Database
from tests.background_harness import Fleet, count, ledger_kinds, run_row, wait_until
from tests.conftest import all_rows

_WORKERS = 4


@pytest.fixture(scope="module")
async def bg_app(bg_settings: Settings, db: Database) -> AsyncIterator[App]:
    """The API side: creates runs (no worker in this process)."""
    async with open_app(bg_settings) as app:
        yield app


@pytest.fixture(scope="module")
def fleet(bg_settings: Settings, bg_app: App) -> Iterator[Fleet]:
    """Four worker processes for the whole module."""
    workers = Fleet(bg_settings)
    workers.spawn(_WORKERS)
    yield workers
    workers.stop()


@contextlib.asynccontextmanager
async def _kept(fleet: Fleet) -> AsyncIterator[None]:
    """Replace killed workers while the block runs."""
    keeper = asyncio.create_task(fleet.keep(_WORKERS))
    try:
        yield
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper


async def _all_final(db: Database, run_ids: list[str]) -> None:
    async def done() -> bool:
        return await count(
            db, "SELECT count(*) FROM background_runs WHERE run_id = ANY(%s) AND status IN ('succeeded', 'failed')",
            run_ids,
        ) == len(run_ids)

    await wait_until(done, timeout=240, what="every run to finish")


async def test_two_hundred_runs_on_four_workers_run_exactly_once_and_never_two_at_once_per_owner(
    bg_app: App, fleet: Fleet, db: Database
) -> None:
    owners = [f"o_fleet_{secrets.token_hex(4)}" for _ in range(20)]
    run_ids = [
        (await create_run(bg_app, Context(owner_id=owner, timezone="Europe/Paris"), "what's on my calendar today?")).run_id
        for _ in range(10) for owner in owners
    ]
    await _all_final(db, run_ids)

    async with all_rows(db) as conn:
        rows = await ledger_summaries(conn, run_ids)
    assert len(rows) == 200
    once = {(r["status"], r["attempts"], r["started"], r["retried"], r["tool_starts"], r["succeeded"], r["delivered"])
            for r in rows}
    assert once == {("succeeded", 1, 1, 0, 1, 1, 1)}
    for owner in owners:
        windows = sorted((r["began"], r["ended"]) for r in rows if r["owner_id"] == owner)
        assert len(windows) == 10
        for (_, previous_end), (next_start, _) in zip(windows, windows[1:], strict=False):
            assert next_start > previous_end, f"two runs of {owner} overlapped"
    assert len({r["pid"] for r in rows}) > 1  # the work was shared among processes
    assert fleet.killed == 0


async def test_a_worker_killed_mid_run_hands_the_run_to_another_worker_which_completes_it_once(
    bg_app: App, fleet: Fleet, db: Database, owner: str
) -> None:
    ctx = Context(owner_id=owner, timezone="Europe/Paris")
    killed_before = fleet.killed
    async with _kept(fleet):
        run = await create_run(bg_app, ctx, "what's on my calendar today? crash-once")
        await _all_final(db, [run.run_id])
    row = await run_row(db, run.run_id)
    assert row["status"] == "succeeded" and row["attempts"] == 2
    assert fleet.killed == killed_before + 1
    kinds = await ledger_kinds(db, run.run_id)
    assert kinds.count("started") == 1 and kinds.count("retried") == 1
    assert kinds.count("succeeded") == 1 and kinds.count("delivered") == 1
    async with all_rows(db) as conn:
        cur = await conn.execute(
            "SELECT data->>'pid' AS pid FROM background_run_events WHERE run_id = %s AND kind IN ('started', 'retried')"
            " ORDER BY id", (run.run_id,),
        )
        pids = [r["pid"] for r in await cur.fetchall()]
    assert len(set(pids)) == 2  # taken up by another worker
    assert await count(db, "SELECT count(*) FROM transcript WHERE turn_id = %s", f"bg:{run.run_id}") == 1


async def test_a_stalled_worker_and_its_successor_drive_the_run_once_and_the_zombie_writes_nothing(
    bg_app: App, fleet: Fleet, db: Database, owner: str
) -> None:
    """The first worker's event loop blocks past the stall time (no heartbeat, no lease renewal), then
    goes on as a zombie: the successor owns the run, its approval is decidable, the zombie moves nothing."""
    from tollgate.graph.background.api import decide_background

    ctx = Context(owner_id=owner, timezone="Europe/Paris")
    run = await create_run(bg_app, ctx, "add a task to buy oat milk stall-once")

    async def awaiting() -> dict[str, object] | None:
        row = await run_row(db, run.run_id)
        return row if row["status"] == "awaiting_approval" and row["attempts"] == 2 else None

    row = await wait_until(awaiting, timeout=60, what="the successor to raise the run's approval")
    await asyncio.sleep(6)  # the zombie wakes up meanwhile and tries to go on
    row = await run_row(db, run.run_id)
    assert (row["status"], row["attempts"]) == ("awaiting_approval", 2)  # the zombie moved nothing
    pending = await bg_app.runner.pending_approvals(ctx)
    assert [p.approval_id for p in pending] == [row["approval_id"]]  # one approval, the successor's: decidable
    assert await decide_background(bg_app, ctx, row["approval_id"], {"type": "approve"}) == run.run_id
    await _all_final(db, [run.run_id])
    row = await run_row(db, run.run_id)
    assert row["status"] == "succeeded"
    assert await count(db, "SELECT count(*) FROM tasks WHERE owner_id = %s AND title ILIKE %s", owner, "%oat milk%") == 1
    async with all_rows(db) as conn:
        cur = await conn.execute(
            "SELECT kind, attempt FROM background_run_events WHERE run_id = %s AND attempt > 0 ORDER BY id",
            (run.run_id,))
        entries = [(r["kind"], r["attempt"]) for r in await cur.fetchall()]
        cur = await conn.execute("SELECT status FROM approvals WHERE thread_id = %s", (run.thread_id,))
        statuses = sorted(r["status"] for r in await cur.fetchall())
    retried = entries.index(("retried", 2))
    assert entries[:retried] == [("started", 1)]  # the zombie's turn event came after the takeover: refused
    assert all(attempt >= 2 for _, attempt in entries[retried:])  # nothing of attempt 1 after the takeover
    assert statuses == ["executed"]  # the zombie raised no approval of its own
    assert await count(db, "SELECT count(*) FROM transcript WHERE turn_id = %s", f"bg:{run.run_id}") == 1


async def test_a_run_that_always_crashes_its_worker_fails_after_three_attempts_with_an_honest_error(
    bg_app: App, fleet: Fleet, db: Database, owner: str
) -> None:
    ctx = Context(owner_id=owner, timezone="Europe/Paris")
    killed_before = fleet.killed
    async with _kept(fleet):
        run = await create_run(bg_app, ctx, "what's on my calendar today? crash-always")
        await _all_final(db, [run.run_id])
    row = await run_row(db, run.run_id)
    assert row["status"] == "failed" and row["attempts"] == 3 and row["error_code"] == "unavailable"
    assert "gave up after 3 attempts" in row["error"]
    assert fleet.killed == killed_before + 3
    kinds = await ledger_kinds(db, run.run_id)
    assert kinds.count("started") + kinds.count("retried") == 3
    assert kinds[-2:] == ["failed", "delivered"]
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT content FROM transcript WHERE turn_id = %s", (f"bg:{run.run_id}",))
        texts = [r["content"] for r in await cur.fetchall()]
    assert len(texts) == 1 and "failed: gave up after 3 attempts" in texts[0]


async def test_a_reminder_due_a_second_ago_fires_once_across_the_workers(
    bg_app: App, fleet: Fleet, db: Database, owner: str
) -> None:
    now = bg_app.services.clock()
    async with all_rows(db) as conn:
        await conn.execute(
            "INSERT INTO reminders (id, owner_id, text, due_at) VALUES (%s, %s, %s, %s)",
            (f"rem_{secrets.token_hex(5)}", owner, "Stretch your legs", now - timedelta(seconds=1)),
        )

    async def fired() -> bool:
        return await count(db, "SELECT count(*) FROM reminders WHERE owner_id = %s AND status = 'fired'", owner) == 1

    await wait_until(fired, what="the reminder to fire")
    await asyncio.sleep(3 * bg_app.services.settings.scheduler_tick_seconds)  # more ticks on every worker
    assert len(fleet.alive) >= 2
    assert await count(
        db, "SELECT count(*) FROM transcript t JOIN threads h USING (thread_id) WHERE h.owner_id = %s", owner
    ) == 1
    assert await count(
        db, "SELECT count(*) FROM reminder_fires f JOIN reminders r ON r.id = f.reminder_id WHERE r.owner_id = %s", owner
    ) == 1
