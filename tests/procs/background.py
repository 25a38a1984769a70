"""A separate OS process running one Tollgate worker against the shared database.

Usage: ``python -m tests.procs.background NAME``. ``DATABASE_URL``, ``TOLLGATE_APPROVAL_SECRET``
and the ``TOLLGATE_WORKER_*`` timings come from the environment; the picker is the embedded
offline one. Faults are injected through the worker's observation hook, keyed by the run's
title: ``crash-always`` SIGKILLs the worker at the run's first tool start, every time;
``crash-once`` does so only for the first worker to get there (an ``O_EXCL`` marker file in
``TOLLGATE_DATA_DIR``). Prints ``ready <pid>`` once the worker is about to start.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import graph._env  # noqa: F401
from graph.background.executor import WorkerHooks
from graph.background.store import BackgroundRun
from graph.background.worker import run_worker
from graph.events import TurnEvent
from graph.settings import Settings


def _crash(run: BackgroundRun, event: TurnEvent) -> None:
    if event["type"] != "tool_start":
        return
    if "crash-always" in run.title:
        os.kill(os.getpid(), signal.SIGKILL)
    if "crash-once" in run.title:
        marker = Path(os.environ["TOLLGATE_DATA_DIR"]) / f"crashed-{run.run_id}"
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)


async def main(argv: list[str]) -> None:
    print(f"ready {os.getpid()}", flush=True)
    await run_worker(Settings(), name=argv[0], hooks=WorkerHooks(on_turn_event=_crash))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
