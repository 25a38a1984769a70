"""Approvals survive a process restart; a crash between the write and its checkpoint never writes twice."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from graph._env import child_environment
from graph.db import Database
from graph.settings import Settings

_ROOT = Path(__file__).resolve().parent.parent


def _run(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = child_environment(settings)
    return subprocess.run(
        [sys.executable, "-m", "tests.procs.turn", *args], cwd=_ROOT, env=env, capture_output=True, text=True, timeout=120
    )


async def _outbox(db: Database, owner: str) -> int:
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM mail_outbox WHERE owner_id = %s", (owner,))
        row = await cur.fetchone()
        return int(row["n"]) if row else -1


async def test_approval_from_a_second_process_executes_once(settings: Settings, db: Database, owner: str) -> None:
    proposed = _run(settings, "propose", owner, owner + "/restart")
    assert proposed.returncode == 0, proposed.stderr[-2000:]
    first = json.loads(proposed.stdout.strip().splitlines()[-1])
    assert first["outcome"] == "proposed" and first["approval_id"]
    assert await _outbox(db, owner) == 0

    approved = _run(settings, "approve", owner, owner + "/restart", first["approval_id"])
    assert approved.returncode == 0, approved.stderr[-2000:]
    second = json.loads(approved.stdout.strip().splitlines()[-1])
    assert second["pid"] != first["pid"]
    assert second["outcome"] == "executed"
    assert await _outbox(db, owner) == 1


async def test_crash_after_the_write_before_the_checkpoint_does_not_write_twice(
    settings: Settings, db: Database, owner: str
) -> None:
    proposed = _run(settings, "propose", owner, owner + "/crash")
    approval_id = json.loads(proposed.stdout.strip().splitlines()[-1])["approval_id"]

    crashed = _run(settings, "approve-and-crash", owner, owner + "/crash", approval_id)
    assert crashed.returncode == -signal.SIGKILL  # it died right after committing the write
    assert await _outbox(db, owner) == 1

    # The checkpoint never recorded the decision, so the approval is still pending; approving
    # again replays the execute step, which finds the ledger row and does not send again.
    retried = _run(settings, "approve", owner, owner + "/crash", approval_id)
    assert retried.returncode == 0, retried.stderr[-2000:]
    out = json.loads(retried.stdout.strip().splitlines()[-1])
    assert out["outcome"] == "executed"
    assert await _outbox(db, owner) == 1
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM effects WHERE idem_key = %s", (approval_id,))
        row = await cur.fetchone()
    assert row is not None and row["n"] == 1
