"""``python -m bench [--smoke] [--only P1,P3] [--profile FILE]``: run the benchmarks, print one table.

``--smoke`` runs every benchmark with tiny counts, all at once, so they cannot rot (part of
``make test``, about 30 s); its timings are not results, so it judges only the goals on counts
(round trips, bytes, exactly-once runs), and it skips what the output says it skips. A full run
takes about nine minutes. Either exits non-zero when a goal on counts is missed. ``--profile``
writes a pyinstrument HTML profile of this process (the in-process turns; servers and workers
are separate processes).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import tollgate.graph._env  # noqa: F401
from bench.env import Env, start_env
from bench.rows import Row
from tollgate.graph.process import event_loop
from tollgate.graph.process.gc_tuning import tune_collector

Suite = Callable[..., Awaitable[list[Row]]]

_SUITES: dict[str, str] = {
    "P1,P2,P4,P5,P6": "bench.turns:run_turn_benchmarks",
    "P3": "bench.serving:run_serving_benchmarks",
    "P7": "bench.background:run_background_benchmarks",
    "P8": "bench.latency:run_latency_benchmarks",
    "P9": "bench.scaleout:run_scaleout_benchmarks",
}
"""Each suite's ids and where it lives: imported once the database is starting (see ``main``)."""


def _load(only: set[str]) -> list[Suite]:
    """The selected suites, imported (LangGraph, LangChain, the app: about 2 s)."""
    selected = [where for ids, where in _SUITES.items() if not only or only & set(ids.split(","))]
    return [getattr(importlib.import_module(module), name) for module, name in (w.split(":") for w in selected)]


def _verdict(row: Row, smoke: bool) -> str:
    if row.ok is None:
        return "-"
    if smoke and not row.counted:
        return "not judged (smoke)"
    return "yes" if row.ok else "**no**"


def _table(rows: list[Row], smoke: bool) -> str:
    lines = ["| id | what | measured | goal | met |", "|---|---|---|---|---|"]
    lines += [f"| {r.id} | {r.what} | {r.value} | {r.goal} | {_verdict(r, smoke)} |" for r in rows]
    return "\n".join(lines)


async def _run(env: Env, suites: list[Suite], smoke: bool, only: set[str]) -> list[Row]:
    """Every selected suite's rows, in table order.

    A full run runs the suites one after another, so no server's start-up or load overlaps
    another suite's measurement. A smoke run's numbers are not results: it runs the suites at
    once, so the server's and the worker's start-up (each a fresh interpreter importing
    LangGraph, about 2 s of CPU) overlaps the in-process benchmarks instead of adding to them.
    """
    runs = [suite(env, smoke=smoke) for suite in suites]
    results = await asyncio.gather(*runs) if smoke else [await run for run in runs]
    return [row for rows in results for row in rows if not only or row.id in only or row.id[:2] in only]


async def _main(env: Env, suites: list[Suite], smoke: bool, only: set[str], profile: Path | None) -> list[Row]:
    profiler = None
    if profile is not None:
        from pyinstrument import Profiler

        profiler = Profiler(async_mode="enabled")
        profiler.start()
    # As a Tollgate process does once it has started (graph.app.open_app): both sides of every
    # in-process comparison run in this process, so they share the same collector settings.
    tune_collector()
    rows = await _run(env, suites, smoke, only)
    if profiler is not None and profile is not None:
        profiler.stop()
        profile.write_text(profiler.output_html())
    return rows


def main() -> None:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--smoke", action="store_true", help="tiny counts, to check the benchmarks still run")
    parser.add_argument("--only", default="", help="comma-separated benchmark ids (P1...P7)")
    parser.add_argument("--profile", type=Path, default=None, help="write a pyinstrument HTML profile here")
    args = parser.parse_args()
    only = {part.strip().upper() for part in args.only.split(",") if part.strip()}
    database = start_env()
    suites = _load(only)  # while the database starts
    rows = event_loop.run(_main(database.result(), suites, args.smoke, only, args.profile))
    mode = "smoke (not results)" if args.smoke else "full"
    command = "python -m bench" + (" --smoke" if args.smoke else "") + (f" --only {','.join(sorted(only))}" if only else "")
    print(f"Tollgate benchmarks, {mode}: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, command: `{command}`, {time.perf_counter() - started:.0f} s "
          "(imports included)")
    print(_table(rows, args.smoke))
    missed = [row for row in rows if row.counted and row.ok is False]
    if missed:
        sys.exit(f"bench: {len(missed)} goal(s) on counts missed: " + "; ".join(f"{r.id} {r.what}" for r in missed))


if __name__ == "__main__":
    main()
