"""Helpers for the background tests: waiting on the database, and a fleet of real worker processes."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tollgate.graph._env import child_environment
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database

from tests.conftest import all_rows

__all__ = ["Fleet", "count", "ledger_kinds", "run_row", "wait_until", "worker_env"]

T = TypeVar("T")
_ROOT = Path(__file__).resolve().parent.parent


async def wait_until(check: Callable[[], Awaitable[T | None]], *, timeout: float = 90.0, what: str = "") -> T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds (a bound, not an assert)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or check!r}")
        await asyncio.sleep(0.1)


async def count(db: Database, sql: str, *params: Any) -> int:
    """``SELECT count(*) ...`` as an int."""
    async with all_rows(db) as conn:
        cur = await conn.execute(sql, params)
        row = await cur.fetchone()
    return int(next(iter(row.values()))) if row else 0


async def run_row(db: Database, run_id: str) -> dict[str, Any]:
    """The run's row."""
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT * FROM background_runs WHERE run_id = %s", (run_id,))
        row = await cur.fetchone()
    assert row is not None
    return dict(row)


async def ledger_kinds(db: Database, run_id: str) -> list[str]:
    """The run's ledger entry kinds in order (turn events as ``turn:<type>``)."""
    async with all_rows(db) as conn:
        cur = await conn.execute(
            "SELECT kind, data FROM background_run_events WHERE run_id = %s ORDER BY id", (run_id,)
        )
        rows = await cur.fetchall()
    return [f"turn:{r['data']['type']}" if r["kind"] == "turn" else r["kind"] for r in rows]


def worker_env(settings: Settings) -> dict[str, str]:
    """The environment a worker process needs to join the test database with the test's timings."""
    return child_environment(
        settings,
        TOLLGATE_WORKER_POLL_SECONDS=str(settings.worker_poll_seconds),
        TOLLGATE_WORKER_HEARTBEAT_SECONDS=str(settings.worker_heartbeat_seconds),
        TOLLGATE_WORKER_STALL_SECONDS=str(settings.worker_stall_seconds),
        TOLLGATE_SCHEDULER_TICK_SECONDS=str(settings.scheduler_tick_seconds),
        TOLLGATE_WORKER_CONCURRENCY=str(settings.worker_concurrency),
        TOLLGATE_THREAD_LEASE_SECONDS=str(settings.thread_lease_seconds),
    )


@dataclass
class Fleet:
    """Real worker processes (``python -m tests.procs.background``); dead ones can be replaced."""

    settings: Settings
    """Settings whose database and timings the workers use."""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    """Every process started, dead or alive."""

    def spawn(self, n: int = 1) -> None:
        """Start ``n`` more workers."""
        for _ in range(n):
            name = f"w{len(self.procs)}"
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "tests.procs.background", name], cwd=_ROOT, env=worker_env(self.settings),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))

    @property
    def alive(self) -> list[subprocess.Popen[bytes]]:
        """The workers still running."""
        return [p for p in self.procs if p.poll() is None]

    @property
    def killed(self) -> int:
        """How many workers died of SIGKILL."""
        return sum(1 for p in self.procs if p.poll() == -signal.SIGKILL)

    async def keep(self, n: int) -> None:
        """Keep ``n`` workers alive until cancelled (replacing the dead)."""
        while True:
            missing = n - len(self.alive)
            if missing > 0:
                self.spawn(missing)
            await asyncio.sleep(0.2)

    def stop(self) -> None:
        """SIGTERM every live worker (graceful), then SIGKILL stragglers."""
        for p in self.alive:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=40)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
