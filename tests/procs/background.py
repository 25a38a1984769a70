"""A separate OS process running one Tollgate worker against the shared database.

Usage: ``python -m tests.procs.background NAME``. ``DATABASE_URL``, ``TOLLGATE_APPROVAL_SECRET``
and the ``TOLLGATE_WORKER_*`` timings come from the environment; the picker is the embedded
offline one. Faults are injected through the worker's observation hook, keyed by the run's
title: ``crash-always`` SIGKILLs the worker at the run's first tool start, every time;
``crash-once`` does so only for the first worker to get there (an ``O_EXCL`` marker file in
``TOLLGATE_DATA_DIR``); ``stall-once`` blocks the first worker's event loop at the run's first
event for ``TOLLGATE_TEST_STALL_SECONDS`` (no heartbeat, no lease renewal: presumed dead, taken
over), then lets it go on as a zombie. Prints ``ready <pid>`` once the worker is about to start.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import tollgate.graph._env  # noqa: F401
from tollgate.graph.background.executor import WorkerHooks
from tollgate.graph.background.store import BackgroundRun
from tollgate.graph.background.worker import run_worker
from tollgate.graph.events import TurnEvent
from tollgate.graph.settings import Settings


def _first(run: BackgroundRun, what: str) -> bool:
    """Whether this worker is the first to get here for ``run`` (an ``O_EXCL`` marker file)."""
    marker = Path(os.environ["TOLLGATE_DATA_DIR"]) / f"{what}-{run.run_id}"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _crash(run: BackgroundRun, event: TurnEvent) -> None:
    if "stall-once" in run.title and event["type"] == "planner_decision" and _first(run, "stalled"):
        time.sleep(float(os.environ.get("TOLLGATE_TEST_STALL_SECONDS", "6")))  # blocks the whole event loop
        return
    if event["type"] != "tool_start":
        return
    if "crash-always" in run.title:
        os.kill(os.getpid(), signal.SIGKILL)
    if "crash-once" in run.title and _first(run, "crashed"):
        os.kill(os.getpid(), signal.SIGKILL)


async def main(argv: list[str]) -> None:
    print(f"ready {os.getpid()}", flush=True)
    await run_worker(Settings(), name=argv[0], hooks=WorkerHooks(on_turn_event=_crash))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
