"""``python -m bench [--smoke] [--only P1,P3] [--profile FILE]``: run the benchmarks, print one table.

``--smoke`` runs every benchmark with tiny counts so they cannot rot (part of ``make test``);
its numbers are not results, and it skips what the output says it skips. A full run takes a
few minutes. ``--profile`` writes a pyinstrument HTML profile of this process (the in-process
turns; servers and workers are separate processes).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import graph._env  # noqa: F401
from bench.background import run_background_benchmarks
from bench.env import Env, open_env
from bench.rows import Row
from bench.serving import run_serving_benchmarks
from bench.turns import run_turn_benchmarks
from graph import event_loop
from graph.gc_tuning import freeze_startup_objects

_SUITES: dict[str, Callable[..., Awaitable[list[Row]]]] = {
    "P1,P2,P4,P5,P6": run_turn_benchmarks,
    "P3": run_serving_benchmarks,
    "P7": run_background_benchmarks,
}


def _table(rows: list[Row]) -> str:
    lines = ["| id | what | measured | goal | met |", "|---|---|---|---|---|"]
    for r in rows:
        met = "-" if r.ok is None else ("yes" if r.ok else "**no**")
        lines.append(f"| {r.id} | {r.what} | {r.value} | {r.goal} | {met} |")
    return "\n".join(lines)


async def _run(env: Env, smoke: bool, only: set[str]) -> list[Row]:
    rows: list[Row] = []
    for ids, suite in _SUITES.items():
        if only and not only & set(ids.split(",")):
            continue
        rows += [row for row in await suite(env, smoke=smoke) if not only or row.id in only]
    return rows


async def _main(smoke: bool, only: set[str], profile: Path | None) -> int:
    started = time.perf_counter()
    profiler = None
    if profile is not None:
        from pyinstrument import Profiler

        profiler = Profiler(async_mode="enabled")
        profiler.start()
    # As a Tollgate process does once it has started (graph.app.open_app): both sides of every
    # in-process comparison run in this process, so they share the same collector settings.
    freeze_startup_objects()
    async with open_env() as env:
        rows = await _run(env, smoke, only)
    if profiler is not None and profile is not None:
        profiler.stop()
        profile.write_text(profiler.output_html())
    mode = "smoke (not results)" if smoke else "full"
    command = "python -m bench" + (" --smoke" if smoke else "") + (f" --only {','.join(sorted(only))}" if only else "")
    print(f"Tollgate benchmarks, {mode}: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, command: `{command}`, {time.perf_counter() - started:.0f} s")
    print(_table(rows))
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--smoke", action="store_true", help="tiny counts, to check the benchmarks still run")
    parser.add_argument("--only", default="", help="comma-separated benchmark ids (P1...P7)")
    parser.add_argument("--profile", type=Path, default=None, help="write a pyinstrument HTML profile here")
    args = parser.parse_args()
    only = {part.strip().upper() for part in args.only.split(",") if part.strip()}
    sys.exit(event_loop.run(_main(args.smoke, only, args.profile)))


if __name__ == "__main__":
    main()
