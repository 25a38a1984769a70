"""P7: background runs per second with 1, 2 and 4 worker processes, exactly once, in the same run.

Workers are real ``tollgate worker`` processes (default concurrency) on the benchmark
database; they are added one step at a time (1, then 2, then 4 alive). At each step the
benchmark queues a batch of read runs spread over 16 owners (procrastinate runs one run per
owner at a time) through :func:`graph.background.api.create_run`, the API's own path, and
times them from the first queued to the last final. Then the run ledgers of the batch are
counted: every run succeeded once, started once, never retried, called its tool once and was
delivered once, or the row says how many did not.

The smoke run starts one worker only: each start is another interpreter importing LangGraph,
and one is enough to keep the path from rotting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack

from bench.env import Env
from bench.owners import demo_owner
from bench.procs import ROOT, Child, started, tollgate_command
from bench.rows import Row
from tollgate.graph._env import child_environment
from tollgate.graph.app import App, open_app
from tollgate.graph.background.api import create_run
from tollgate.graph.background.queue import ensure_queue_schema
from tollgate.graph.background.store import ledger_summaries
from tollgate.graph.state import Context
from tollgate.graph.store.db import Database

__all__ = ["run_background_benchmarks"]

_OWNERS = 16
_ASK = "what's on my calendar today?"
_TZ = "UTC"
_ONCE = {"status": "succeeded", "attempts": 1, "started": 1, "retried": 0, "tool_starts": 1, "succeeded": 1,
         "delivered": 1}
"""The ledger summary of a run that ran exactly once."""


async def _scalar(db: Database, sql: str, *params: object) -> int:
    async with db.pool.connection() as conn:
        cur = await conn.execute(sql, params)
        row = await cur.fetchone()
    return int(next(iter(row.values()))) if row else 0


async def _wait(check: Callable[[], Awaitable[bool]], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"P7: timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.05)


async def _exactly_once(db: Database, run_ids: list[str]) -> int:
    """How many of ``run_ids`` ran exactly once (by their ledgers)."""
    async with db.pool.connection() as conn:
        rows = await ledger_summaries(conn, run_ids)
    return sum(1 for r in rows if all(r[k] == v for k, v in _ONCE.items()))


async def _owners(db: Database) -> list[Context]:
    """``_OWNERS`` fresh owners with the demo data."""
    return [Context(owner_id=await demo_owner(db, f"p7-{i}", _TZ), timezone=_TZ) for i in range(_OWNERS)]


async def _batch(app: App, owners: list[Context], size: int, budget: float) -> tuple[float, list[str]]:
    """Queue ``size`` runs round-robin over the owners; seconds until all are final, and their ids."""
    db = app.services.db
    start = time.perf_counter()
    run_ids = [(await create_run(app, owners[i % len(owners)], _ASK)).run_id for i in range(size)]

    async def final() -> bool:
        return await _scalar(
            db, "SELECT count(*) FROM background_runs WHERE run_id = ANY(%s) AND status IN ('succeeded', 'failed', 'cancelled')",
            run_ids,
        ) == len(run_ids)

    await _wait(final, timeout=budget, what=f"{size} background runs to finish")
    return time.perf_counter() - start, run_ids


async def run_background_benchmarks(env: Env, *, smoke: bool) -> list[Row]:
    """Run P7 and return its rows."""
    size = 4 if smoke else 64
    budget = 60.0 if smoke else 180.0
    settings = env.settings.model_copy(update={"default_timezone": _TZ})
    child_env = child_environment(settings, TOLLGATE_WORKER_POLL_SECONDS="0.5")
    logs = ROOT / "var" / "bench" / "logs"
    results: list[tuple[int, float, int]] = []
    total_once = total = 0
    def worker(i: int) -> AbstractAsyncContextManager[Child]:
        return started(tollgate_command("worker", "--name", f"bench-w{i}"), child_env, logs / f"worker-{i}.log")

    async with AsyncExitStack() as stack:
        await stack.enter_async_context(worker(0))
        alive = 1
        # While the first worker starts: this side's app and the owners.
        app = await stack.enter_async_context(open_app(settings))
        db = app.services.db
        await ensure_queue_schema(db)
        owners = await _owners(db)
        for workers in (1,) if smoke else (1, 2, 4):
            for i in range(alive, workers):
                await stack.enter_async_context(worker(i))
            alive = max(alive, workers)

            async def registered(n: int = workers) -> bool:
                return await _scalar(
                    db, "SELECT count(*) FROM procrastinate_workers WHERE last_heartbeat > now() - interval '30 seconds'"
                ) >= n

            await _wait(registered, timeout=120, what=f"{workers} workers to start")
            await _batch(app, owners, min(size, 2 * workers), budget)  # warm-up: every worker has run a turn
            seconds, run_ids = await _batch(app, owners, size, budget)
            once = await _exactly_once(db, run_ids)
            total_once += once
            total += len(run_ids)
            results.append((workers, seconds, len(run_ids)))
    rates = [n / seconds for _, seconds, n in results]
    value = "; ".join(f"{w} worker{'s' if w > 1 else ''}: {r:.1f}/s" for (w, _, _), r in zip(results, rates, strict=True))
    skipped = " (2 and 4 workers: skipped in smoke mode)" if smoke else ""
    speed_up = "skipped in smoke mode" if smoke else f"{rates[1] / rates[0]:.2f}"
    rows = [
        Row("P7", f"background runs/s by worker processes ({size} read runs each, {_OWNERS} owners)",
            value + skipped, "-", None),
        Row("P7", "speed-up from 1 to 2 worker processes", speed_up, "-", None),
        Row("P7", "runs that ran exactly once (ledger: started 1, retried 0, tool 1, succeeded 1, delivered 1)",
            f"{total_once} / {total}", "all", total_once == total, counted=True),
    ]
    return rows
