"""``python -m bench [--smoke]``: run the benchmarks and print one table of ratios.

``--smoke`` runs every benchmark with tiny counts (a few seconds) so they cannot rot; its
numbers are not results. Full runs take a few minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
from datetime import UTC, datetime

import graph._env  # noqa: F401
from bench.env import open_env
from bench.turns import Row, run_turn_benchmarks


def _table(rows: list[Row]) -> str:
    lines = ["| id | what | measured | goal | met |", "|---|---|---|---|---|"]
    for r in rows:
        met = "-" if r.ok is None else ("yes" if r.ok else "**no**")
        lines.append(f"| {r.id} | {r.what} | {r.value} | {r.goal} | {met} |")
    return "\n".join(lines)


async def _main(smoke: bool) -> int:
    async with open_env() as env:
        rows = await run_turn_benchmarks(env, smoke=smoke)
    mode = "smoke (not results)" if smoke else "full"
    print(f"Tollgate benchmarks, {mode}: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, command: python -m bench{' --smoke' if smoke else ''}")
    print(_table(rows))
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--smoke", action="store_true", help="tiny counts, to check the benchmarks still run")
    args = parser.parse_args()
    sys.exit(asyncio.run(_main(args.smoke)))


if __name__ == "__main__":
    main()
