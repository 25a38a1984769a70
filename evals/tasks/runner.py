"""The tasks eval: multi-step tasks done in one user message, every write approved through the interrupt.

Each task (:mod:`evals.tasks.cases`) runs on a fresh owner with the demo data: one user message,
then every approval the turn asks for is approved through the runner (the real interrupt, its
token and its checks) until the turn ends. It is done when its check of the stores holds. With
:class:`~evals.tasks.model.TaskFollower` the model follows the task exactly, so the eval
measures the runtime (results carried step to step, ids bound, writes mid-task, one request per
step); with a configured OpenAI-compatible model it measures that model on the same tasks.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from langchain_core.language_models import BaseChatModel

from tollgate.evals.tasks.cases import TASKS, Task
from tollgate.evals.tasks.model import TaskFollower
from tollgate.graph.runner import TurnOutcome, TurnRunner
from tollgate.graph.services import Services
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.store.owner_scope import owner_transaction
from tollgate.graph.turn import build_graph
from tollgate.tools.builtin import default_registry
from tollgate.tools.demo import seed_demo

__all__ = ["MAX_APPROVALS", "Report", "TaskResult", "run_tasks_eval"]

MAX_APPROVALS = 10
"""Approvals one task may ask for before it counts as not done (a model stuck proposing)."""


@dataclass
class TaskResult:
    """How one task went."""

    task: Task
    done: bool
    approvals: int
    outcome: str
    reply: str
    error: str = ""


@dataclass
class Report:
    """Every task's result."""

    results: list[TaskResult] = field(default_factory=list)
    model: str = "scripted (follows each task)"

    def share(self) -> float:
        """The share of tasks done in one user message."""
        return sum(r.done for r in self.results) / len(self.results) if self.results else 0.0

    def table(self) -> str:
        """A Markdown summary, then each task not done."""
        done = sum(r.done for r in self.results)
        approvals = sum(r.approvals for r in self.results)
        lines = [
            f"Tasks eval ({self.model}): {done}/{len(self.results)} tasks done in one user message "
            f"({100 * self.share():.1f} %), {approvals} approvals decided through the interrupt",
        ]
        lines += [f"- not done: {r.task.name} (outcome {r.outcome}; {r.error or r.reply[:120]!r})"
                  for r in self.results if not r.done]
        return "\n".join(lines)


async def _approve_all(runner: TurnRunner, ctx: Context, out: TurnOutcome) -> tuple[TurnOutcome, int]:
    approvals = 0
    while out.approval is not None and approvals < MAX_APPROVALS:
        approvals += 1
        actions = out.approval.actions or (out.approval,)
        decision: Any = [{"type": "approve"} for _ in actions] if len(actions) > 1 else {"type": "approve"}
        out = await runner.decide(ctx, out.approval.approval_id, decision)
    return out, approvals


async def _run_one(db: Database, settings: Settings, task: Task, model: BaseChatModel,
                   clock: Callable[[], datetime]) -> TaskResult:
    owner = "task_" + uuid.uuid4().hex[:12]
    async with owner_transaction(db.pool, owner) as conn:
        await seed_demo(conn, owner, clock(), "Europe/Paris")
    services = Services(settings=settings, db=db, registry=default_registry(), picker_model=model, clock=clock,
                        approval_key=settings.approval_key())
    runner = TurnRunner(build_graph(services, checkpointer=await open_checkpointer(db, setup=False)), services)
    ctx = Context(owner_id=owner, timezone="Europe/Paris", channel="chat")
    try:
        out, approvals = await _approve_all(runner, ctx, await runner.send(ctx, f"{owner}/task", task.request))
    except Exception as exc:  # noqa: BLE001 - a task that crashes is a task not done, with its reason
        return TaskResult(task, False, 0, "error", "", f"{type(exc).__name__}: {exc}"[:200])
    async with owner_transaction(db.pool, owner) as conn:
        cur = await conn.execute(task.check, {"o": owner})
        row = await cur.fetchone()
    done = bool(row and row["ok"]) and out.approval is None and out.reply is not None
    return TaskResult(task, done, approvals, str(out.outcome), out.reply or "")


async def run_tasks_eval(
    db: Database, settings: Settings, clock: Callable[[], datetime], *,
    tasks: Sequence[Task] = TASKS, model: Callable[[Task], BaseChatModel] | None = None, label: str = "",
) -> Report:
    """Run ``tasks`` on ``db`` (migrated); ``model`` builds each task's picker (default: the task's follower)."""
    await open_checkpointer(db)  # the checkpointer's own migrations, once
    report = Report(model=label or Report.model)
    for task in tasks:
        picker = model(task) if model is not None else TaskFollower(script=list(task.script))
        report.results.append(await _run_one(db, settings, task, picker, clock))
    return report
