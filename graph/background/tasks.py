"""The queue's tasks: drive runs, and the periodic ticks (stall recovery, triggers, reminders).

Run jobs carry only ids and the decision (never a token: the runner reads it from the
approvals table). Their ``lock`` is the owner, so one owner has at most one running run; they
retry (crashes included) until :data:`~graph.background.queue.MAX_ATTEMPTS`. The periodic jobs
are deferred once per tick across all workers (procrastinate's periodic deferrer); a queueing
lock keeps at most one of each waiting. They take no run lock: a dead worker's stalled tick must
never block the recovery that frees it, and overlapping scans are safe by construction.

The expiry tick closes approvals past their expiry and reconciles threads whose turn died
holding them (:mod:`graph.background.expiry`). Stalled-job recovery is procrastinate's recipe: a job whose worker stopped heart-beating is
retried; one that has used its attempts instead fails its run with an honest error.
"""

from __future__ import annotations

import logging
from typing import Any

import procrastinate
from procrastinate import exceptions as pexc
from procrastinate.job_context import JobContext
from procrastinate.jobs import Status

from tollgate.graph.background.executor import Runtime, fail_run, resume_run, start_run
from tollgate.graph.background.expiry import expire_approvals, recover_threads
from tollgate.graph.background.queue import (
    EVALUATE_TRIGGERS,
    EXPIRE_APPROVALS,
    FIRE_REMINDERS,
    MAX_ATTEMPTS,
    RECOVER_STALLED,
    RUN_DECIDE,
    RUN_START,
    RUN_TASKS,
)
from tollgate.graph.background.reminders import fire_reminders
from tollgate.graph.background.triggers import evaluate_triggers

__all__ = ["build_queue_app", "recover_stalled"]

_log = logging.getLogger(__name__)


def _runtime(context: JobContext) -> Runtime:
    rt = context.additional_context.get("tollgate")
    if not isinstance(rt, Runtime):
        raise RuntimeError("a Tollgate job ran on a worker without its runtime")
    return rt


async def recover_stalled(queue: procrastinate.App, rt: Runtime) -> int:
    """Retry the jobs of workers that stopped heart-beating; fail runs out of attempts. Return how many."""
    handled = 0
    for job in await queue.job_manager.get_stalled_jobs(seconds_since_heartbeat=rt.stall_seconds):
        run_id = job.task_kwargs.get("run_id")
        try:
            if job.task_name in RUN_TASKS and isinstance(run_id, str) and job.attempts + 1 >= MAX_ATTEMPTS:
                await queue.job_manager.finish_job(job, status=Status.FAILED, delete_job=False)
                await fail_run(
                    rt, run_id, code="unavailable",
                    message=f"gave up after {MAX_ATTEMPTS} attempts: the worker running it stopped each time before it finished",
                )
            else:
                await queue.job_manager.retry_job(job)
        except pexc.ConnectorException:
            continue  # another recoverer moved it first
        handled += 1
        _log.warning("recovered stalled job %s (%s, attempt %d)", job.id, job.task_name, job.attempts + 1)
    return handled


def build_queue_app(rt: Runtime, *, conninfo: str, tick_seconds: int, pool_size: int = 4) -> procrastinate.App:
    """A procrastinate app with Tollgate's tasks, on its own small pool (LISTEN needs its own connections)."""
    queue = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=conninfo, min_size=1, max_size=pool_size)
    )
    retry = procrastinate.RetryStrategy(max_attempts=MAX_ATTEMPTS - 1, wait=1)
    cron = f"* * * * * */{tick_seconds}"

    @queue.task(name=RUN_START, pass_context=True, retry=retry)
    async def run_start(context: JobContext, run_id: str) -> None:
        await start_run(_runtime(context), run_id, job_attempt=context.job.attempts)

    @queue.task(name=RUN_DECIDE, pass_context=True, retry=retry)
    async def run_decide(context: JobContext, run_id: str, approval_id: str, decision: dict[str, Any]) -> None:
        await resume_run(_runtime(context), run_id, approval_id, decision, job_attempt=context.job.attempts)

    @queue.periodic(cron=cron, periodic_id="tick")
    @queue.task(name=RECOVER_STALLED, pass_context=True, queueing_lock=RECOVER_STALLED)
    async def recover(context: JobContext, timestamp: int) -> None:
        await recover_stalled(context.app, _runtime(context))

    @queue.periodic(cron=cron, periodic_id="tick")
    @queue.task(name=EVALUATE_TRIGGERS, pass_context=True, queueing_lock=EVALUATE_TRIGGERS)
    async def triggers(context: JobContext, timestamp: int) -> None:
        await evaluate_triggers(_runtime(context).app)

    @queue.periodic(cron=cron, periodic_id="tick")
    @queue.task(name=EXPIRE_APPROVALS, pass_context=True, queueing_lock=EXPIRE_APPROVALS)
    async def expiry(context: JobContext, timestamp: int) -> None:
        rt = _runtime(context)
        await expire_approvals(rt)
        await recover_threads(rt)

    @queue.periodic(cron=cron, periodic_id="tick")
    @queue.task(name=FIRE_REMINDERS, pass_context=True, queueing_lock=FIRE_REMINDERS)
    async def reminders(context: JobContext, timestamp: int) -> None:
        await fire_reminders(_runtime(context).app)

    return queue
