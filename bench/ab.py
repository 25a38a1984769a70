"""``python -m bench.ab [--base REF]``: the working tree's server against another commit's, in one run.

A change to the server is judged by what it does to a served turn, and on this shared 2-core
machine two runs minutes apart differ by more than most changes do (bench/README.md, "Server
changes side by side"). So both versions run at once: two
``tollgate serve`` processes on one fresh database, the base commit's from a git worktree, and
the same HTTP/SSE load as P3's (16 clients, a calendar turn each, the offline picker) goes to
one and then the other, round by round, alternating who goes first. It prints each round and
the medians: turns per second and the server's CPU per turn, the working tree's over the base's.

The base runs from a detached worktree of ``REF`` under ``var/bench/ab`` (removed at the end),
put first on its server's ``PYTHONPATH``; a module only the working tree has is still found
there. The working tree's app migrates the fresh database first; the base's server, starting
after it, finds nothing to apply unless the base has a migration the working tree lacks.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path

import psutil

import tollgate.graph._env  # noqa: F401
from bench.env import start_env
from bench.procs import ROOT, free_port, started
from bench.serving import (
    CONCURRENCY, LOGS, HttpClients, Load, measured, p3_owners, p3_settings, run_load, serve_command,
)
from tollgate.graph.app import open_app
from tollgate.graph.process import event_loop

_WORK = ROOT / "var" / "bench" / "ab"


@contextmanager
def _worktree(ref: str) -> Iterator[Path]:
    """A ``PYTHONPATH`` entry whose ``tollgate`` is ``ref``'s code (a detached worktree), removed on exit."""
    tree, path = _WORK / "base", _WORK / "path"
    shutil.rmtree(_WORK, ignore_errors=True)
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=True)
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), ref], cwd=ROOT, check=True)
    try:
        path.mkdir(parents=True)
        (path / "tollgate").symlink_to(tree, target_is_directory=True)
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
        shutil.rmtree(_WORK, ignore_errors=True)


async def _compare(ref: str, rounds: int, per_client: int) -> dict[str, list[Load]]:
    settings, child_env = p3_settings(start_env().result())
    loads: dict[str, list[Load]] = {"base": [], "tree": []}
    with _worktree(ref) as base_path:
        async with AsyncExitStack() as stack:
            app = await stack.enter_async_context(open_app(settings))  # migrates the database
            servers: dict[str, tuple[psutil.Process, HttpClients]] = {}
            owners = await p3_owners(app.services.db)
            for name, extra in (("base", {"PYTHONPATH": str(base_path)}), ("tree", {})):
                port = free_port()
                child = await stack.enter_async_context(started(serve_command(port), child_env | extra,
                                                                LOGS / f"ab-{name}.log"))
                await child.answering(f"http://127.0.0.1:{port}/readyz")
                http = HttpClients(f"http://127.0.0.1:{port}", owners)
                stack.push_async_callback(http.aclose)
                servers[name] = (psutil.Process(child.proc.pid), http)
            for _, http in servers.values():  # warm-up (not counted): each client's thread, each server's first turns
                await asyncio.gather(*(http.turn(i) for i in range(CONCURRENCY)))
            for r in range(rounds):
                for name in ("base", "tree") if r % 2 == 0 else ("tree", "base"):
                    process, http = servers[name]
                    loads[name].append(await measured(run_load(http.turn, per_client=per_client, budget=90.0), process))
    return loads


def _report(ref: str, loads: dict[str, list[Load]]) -> str:
    lines = [f"| round | base ({ref}) turns/s | working tree turns/s | base CPU/turn | working tree CPU/turn |",
             "|---|---|---|---|---|"]
    pairs = list(zip(loads["base"], loads["tree"], strict=True))
    for i, (b, t) in enumerate(pairs, 1):
        lines.append(f"| {i} | {b.rate:.1f} | {t.rate:.1f} | {b.cpu_per_turn:.2f} ms | {t.cpu_per_turn:.2f} ms |")
    # Each round's two loads ran back to back, so their ratio sees the same machine: its median
    # (and the spread of the middle half) says more than the ratio of the two medians.
    paired = sorted(t.cpu_per_turn / b.cpu_per_turn for b, t in pairs)
    quartiles = statistics.quantiles(paired, n=4) if len(paired) > 1 else [paired[0]] * 3
    rate = {k: statistics.median(x.rate for x in v) for k, v in loads.items()}
    cpu = {k: statistics.median(x.cpu_per_turn for x in v) for k, v in loads.items()}
    lines.append(f"\nmedians: turns/s {rate['tree']:.1f} / {rate['base']:.1f} = {rate['tree'] / rate['base']:.3f}; "
                 f"server CPU per turn {cpu['tree']:.2f} / {cpu['base']:.2f} ms = {cpu['tree'] / cpu['base']:.3f} "
                 f"(working tree / {ref}, concurrency {CONCURRENCY}, {sum(x.turns for x in loads['tree'])} turns each)")
    lines.append(f"server CPU per turn, round by round: median {statistics.median(paired):.3f} "
                 f"(middle half {quartiles[0]:.3f} to {quartiles[2]:.3f}, {len(paired)} rounds)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD", help="the commit to compare with (default: HEAD)")
    parser.add_argument("--rounds", type=int, default=20, help="rounds per server (default: 20)")
    parser.add_argument("--per-client", type=int, default=10, help="turns per client per round (default: 10)")
    args = parser.parse_args(argv)
    loads = event_loop.run(_compare(args.base, args.rounds, args.per_client))
    print(_report(args.base, loads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
