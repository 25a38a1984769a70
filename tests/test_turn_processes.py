"""Turns across OS processes: approvals survive a restart, and a process killed mid-turn or
mid-effect frees its thread within the lease time, writes nothing twice and strands nothing."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tollgate.graph._env import child_environment
from tollgate.graph.app import open_app
from tollgate.graph.events import TurnEvent
from tollgate.graph.ledger.event_log import INTERRUPTED_RUN_MESSAGE
from tollgate.graph.ledger.approval_contract import check_approvals
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store.db import Database
from tollgate.policies.errors import ApprovalInvalid
from tests.conftest import all_rows
from tests.fakes import ScriptedModel, call, say
from tollgate.web import store
from tollgate.web.hub import TurnHub

_ROOT = Path(__file__).resolve().parent.parent
_LEASE = 2.0


def _env(settings: Settings) -> dict[str, str]:
    return child_environment(settings, TOLLGATE_THREAD_LEASE_SECONDS=str(_LEASE), TOLLGATE_THREAD_WAIT_SECONDS="30")


def _run(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.procs.turn", *args], cwd=_ROOT, env=_env(settings),
                          capture_output=True, text=True, timeout=120)


def _out(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


async def _hang_then_kill(settings: Settings, db: Database, *args: str) -> float:
    """Start a process that stops mid-turn, SIGKILL it once it holds its thread; return when it died."""
    with subprocess.Popen([sys.executable, "-m", "tests.procs.turn", *args], cwd=_ROOT, env=_env(settings),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            line = await asyncio.to_thread(proc.stdout.readline)
            assert line.strip() == "hanging", line
            for _ in range(500):  # until the turn holds its thread
                async with all_rows(db) as conn:
                    cur = await conn.execute("SELECT holder FROM thread_leases WHERE thread_id = %s", (args[2],))
                    row = await cur.fetchone()
                if row is not None and row["holder"]:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)  # well inside the hang
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return time.monotonic()


async def _count(db: Database, sql: str, *params: str) -> int:
    async with all_rows(db) as conn:
        cur = await conn.execute(sql, params)
        row = await cur.fetchone()
    return int(next(iter(row.values()))) if row else -1


async def _outbox(db: Database, owner: str) -> int:
    return await _count(db, "SELECT count(*) FROM mail_outbox WHERE owner_id = %s", owner)


def _reader() -> ScriptedModel:
    return ScriptedModel(steps=[call("calendar__list", {"range": "today"}), say("")])


async def test_approval_from_a_second_process_executes_once(settings: Settings, db: Database, owner: str) -> None:
    first = _out(_run(settings, "propose", owner, owner + "/restart"))
    assert first["outcome"] == "proposed" and first["approval_id"]
    assert await _outbox(db, owner) == 0
    second = _out(_run(settings, "approve", owner, owner + "/restart", first["approval_id"]))
    assert second["pid"] != first["pid"] and second["outcome"] == "executed"
    assert await _outbox(db, owner) == 1


async def test_a_process_killed_after_the_write_commits_never_writes_twice(
    settings: Settings, db: Database, owner: str, ctx: Context
) -> None:
    thread = owner + "/crash"
    approval_id = _out(_run(settings, "propose", owner, thread))["approval_id"]
    crashed = _run(settings, "approve-and-crash", owner, thread, approval_id)
    assert crashed.returncode == -signal.SIGKILL  # it died right after committing the write
    assert await _outbox(db, owner) == 1

    # Another process: the approval ran, so approving again is refused; nothing is sent twice.
    retried = _run(settings, "approve", owner, thread, approval_id)
    assert retried.returncode != 0 and "already executed" in retried.stderr
    assert await _outbox(db, owner) == 1
    assert await _count(db, "SELECT count(*) FROM effects WHERE idem_key = %s", approval_id) == 1

    fast = settings.model_copy(update={"thread_lease_seconds": _LEASE})
    async with open_app(fast, picker_model=_reader()) as app:
        me = Context(owner_id=owner, timezone="Europe/Paris")
        assert (await app.runner.send(me, thread, "what's on my calendar today?")).outcome == "read"
        await check_approvals(db.pool, app.runner.graph, [thread])


async def test_a_process_killed_mid_turn_frees_its_thread_within_the_lease_time(
    settings: Settings, db: Database, owner: str, ctx: Context
) -> None:
    thread = owner + "/killed-in-model"
    died = await _hang_then_kill(settings, db, "read-and-hang", owner, thread)
    fast = settings.model_copy(update={"thread_lease_seconds": _LEASE})
    async with open_app(fast, picker_model=_reader()) as app:
        me = Context(owner_id=owner, timezone="Europe/Paris")
        out = await app.runner.send(me, thread, "what's on my calendar today?")
        waited = time.monotonic() - died
        await check_approvals(db.pool, app.runner.graph, [thread])
    assert out.outcome == "read"
    assert waited <= _LEASE + 1.5  # the dead holder's lease ran out; nothing waited longer


async def test_a_process_killed_mid_effect_leaves_nothing_approved_with_nothing_run(
    settings: Settings, db: Database, owner: str, ctx: Context
) -> None:
    thread = owner + "/killed-in-effect"
    approval_id = _out(_run(settings, "propose", owner, thread))["approval_id"]
    await _hang_then_kill(settings, db, "approve-and-hang", owner, thread, approval_id)
    assert await _count(db, "SELECT count(*) FROM approvals WHERE approval_id = %s AND status = 'approved'",
                        approval_id) == 1  # as the dead process left it
    fast = settings.model_copy(update={"thread_lease_seconds": _LEASE})
    async with open_app(fast, picker_model=ScriptedModel(steps=[])) as app:
        me = Context(owner_id=owner, timezone="Europe/Paris")
        try:
            await app.runner.decide(me, approval_id, {"type": "approve"})
            raise AssertionError("a decision on a dead turn's approval ran")
        except ApprovalInvalid as exc:
            assert "already failed" in exc.message  # taking the thread reconciled it: nothing ran
        await check_approvals(db.pool, app.runner.graph, [thread])
    assert await _outbox(db, owner) == 0
    assert await _count(db, "SELECT count(*) FROM effects WHERE idem_key = %s", approval_id) == 0


async def _follow(hub: TurnHub, thread: str, after_id: int) -> list[TurnEvent]:
    return [event async for event in hub.follow(thread, after_id)]


async def test_a_turn_killed_mid_execute_has_its_run_closed_by_the_tick_and_its_followers_end(
    settings: Settings, db: Database, owner: str
) -> None:
    """A server killed inside an approved write leaves its run open in the event log: its thread reads
    as running and a reconnecting client waits (120 s, once) for an event that never comes. The
    scheduler's tick takes the thread over once the dead holder's lease ran out: the approval ends
    ``failed``, and the run ends with a fatal ``unavailable`` event every follower gets."""
    thread = owner + "/killed-logged"
    approval_id = _out(_run(settings, "propose", owner, thread))["approval_id"]
    died = await _hang_then_kill(settings, db, "approve-and-hang+logged", owner, thread, approval_id)
    latest = await store.latest_event(db, thread)
    assert latest is not None and not store.ends_run(latest)
    assert store.thread_status(pending=False, latest=latest) == "running"
    follower = asyncio.create_task(_follow(TurnHub(db, idle_seconds=120), thread, latest["id"]))
    fast = settings.model_copy(update={"thread_lease_seconds": _LEASE})
    async with open_app(fast, picker_model=ScriptedModel(steps=[])) as app:
        # The tick, until it took this thread over (other tests' dead holders may be taken first).
        while not store.ends_run(await store.latest_event(db, thread) or latest):
            assert time.monotonic() - died < _LEASE + 10, "the dead holder's thread was never taken over"
            await app.runner.recover_stale()
            await asyncio.sleep(0.2)
        events = await asyncio.wait_for(follower, timeout=20)  # it polls the log each second
        await check_approvals(db.pool, app.runner.graph, [thread])
    assert time.monotonic() - died < _LEASE + 25
    [end] = events
    assert end["type"] == "error" and end["turn_id"] == latest["turn_id"] and end["seq"] == latest["seq"] + 1
    assert end["data"] == {"code": "unavailable", "message": INTERRUPTED_RUN_MESSAGE, "fatal": True}
    assert store.thread_status(pending=False, latest=await store.latest_event(db, thread)) == "idle"
    assert await _count(db, "SELECT count(*) FROM approvals WHERE approval_id = %s AND status = 'failed'",
                        approval_id) == 1
    assert await _outbox(db, owner) == 0


async def test_the_next_message_on_a_thread_whose_turn_was_killed_closes_that_turns_run_first(
    settings: Settings, db: Database, owner: str
) -> None:
    thread = owner + "/killed-then-asked"
    approval_id = _out(_run(settings, "propose", owner, thread))["approval_id"]
    await _hang_then_kill(settings, db, "approve-and-hang+logged", owner, thread, approval_id)
    dead = await store.latest_event(db, thread)
    assert dead is not None and not store.ends_run(dead)
    fast = settings.model_copy(update={"thread_lease_seconds": _LEASE})
    async with open_app(fast, picker_model=_reader()) as app:
        out = await app.runner.send(Context(owner_id=owner, timezone="Europe/Paris"), thread,
                                    "what's on my calendar today?")
    assert out.outcome == "read"
    closed = [e async for e in TurnHub(db, idle_seconds=1).follow(thread, dead["id"], turn_id=dead["turn_id"])]
    assert [(e["type"], e["data"].get("code")) for e in closed] == [("error", "unavailable")]
