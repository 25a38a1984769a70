"""Workers: ``tollgate worker`` processes, or one inside ``make run``'s process.

Any number of workers on any number of machines share one database: procrastinate hands each
job to one of them (``FOR UPDATE SKIP LOCKED``), its lock keeps one running run per owner,
heartbeats tell live workers from dead ones, and the periodic ticks are deferred once across
all of them. Background turns use the same graph, checkpointer and approvals as chat, with
``background_step_budget`` tool steps per turn.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from langchain_core.language_models import BaseChatModel

from tollgate.graph.app import App, open_app
from tollgate.graph.background.executor import Runtime, WorkerHooks
from tollgate.graph.background.queue import ensure_queue_schema
from tollgate.graph.background.tasks import build_queue_app
from tollgate.graph.runner import TurnRunner
from tollgate.graph.services import Hooks, utc_now
from tollgate.graph.settings import Settings
from tollgate.graph.turn import build_graph

__all__ = ["WorkerHandle", "background_app", "run_worker", "start_in_process_worker"]

_GRACEFUL_SECONDS = 30.0


def background_app(app: App) -> App:
    """``app`` with a runner whose turns have the background step budget (same db, checkpointer, services)."""
    settings = app.services.settings
    services = replace(app.services, settings=settings.model_copy(update={"step_budget": settings.background_step_budget}))
    graph = build_graph(services, checkpointer=app.runner.graph.checkpointer)
    return App(services=services, runner=TurnRunner(graph, services))


async def _work(
    app: App, *, concurrency: int, name: str, hooks: WorkerHooks, install_signal_handlers: bool
) -> None:
    settings = app.services.settings
    await ensure_queue_schema(app.services.db)
    rt = Runtime(app=background_app(app), hooks=hooks, stall_seconds=settings.worker_stall_seconds)
    queue = build_queue_app(rt, conninfo=app.services.db.url, tick_seconds=settings.scheduler_tick_seconds)
    async with queue.open_async():
        await queue.run_worker_async(
            name=name,
            concurrency=concurrency,
            fetch_job_polling_interval=settings.worker_poll_seconds,
            abort_job_polling_interval=settings.worker_poll_seconds,
            update_heartbeat_interval=settings.worker_heartbeat_seconds,
            stalled_worker_timeout=settings.worker_stall_seconds,
            shutdown_graceful_timeout=_GRACEFUL_SECONDS,
            delete_jobs="successful",
            additional_context={"tollgate": rt},
            install_signal_handlers=install_signal_handlers,
        )


async def run_worker(
    settings: Settings,
    *,
    concurrency: int | None = None,
    name: str = "tollgate-worker",
    picker_model: BaseChatModel | None = None,
    naturalizer_model: BaseChatModel | None = None,
    clock: Callable[[], datetime] = utc_now,
    hooks: WorkerHooks | None = None,
    install_signal_handlers: bool = True,
) -> None:
    """Run one worker process until SIGINT/SIGTERM (running runs finish, up to 30 s, else retry elsewhere).

    ``concurrency`` defaults to ``settings.worker_concurrency``; the pool is sized for it.
    """
    slots = concurrency or settings.worker_concurrency
    sized = settings.model_copy(update={"pool_max_size": max(settings.pool_max_size, 2 * slots + 4)})
    async with open_app(sized, picker_model=picker_model, naturalizer_model=naturalizer_model, clock=clock,
                        hooks=Hooks()) as app:
        await _work(app, concurrency=slots, name=name, hooks=hooks or WorkerHooks(),
                    install_signal_handlers=install_signal_handlers)


@dataclass
class WorkerHandle:
    """A worker running as a task of the current event loop."""

    task: asyncio.Task[None]
    """The worker task."""

    async def stop(self) -> None:
        """Stop taking jobs, let running ones finish (bounded), and wait for the worker to end."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def start_in_process_worker(app: App, *, concurrency: int = 1, hooks: WorkerHooks | None = None) -> WorkerHandle:
    """Start one worker inside this process over ``app``'s database (``make run``); stop it with ``handle.stop()``."""
    await ensure_queue_schema(app.services.db)  # fail here, in the caller, rather than inside the task
    task = asyncio.create_task(
        _work(app, concurrency=concurrency, name="tollgate-in-process", hooks=hooks or WorkerHooks(),
              install_signal_handlers=False),
        name="tollgate-worker",
    )
    return WorkerHandle(task=task)
