"""The tasks eval: every multi-step task done in one user message, every write approved through the interrupt."""

from __future__ import annotations

import pytest
from langchain_core.language_models import BaseChatModel

from tollgate.evals.tasks import TASKS, run_tasks_eval
from tollgate.evals.tasks.model import Say, TaskFollower
from tollgate.graph.models.llm import build_model, close_model
from tollgate.graph.models.model_settings import ProviderSettings
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database
from tests.conftest import NOW
from tests.openai_stub import StubServer, text, tool_call


async def test_every_task_is_done_in_one_user_message(
    db: Database, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    report = await run_tasks_eval(db, settings, lambda: NOW)
    with capsys.disabled():
        print("\n" + report.table())
    assert len(report.results) >= 40
    assert report.share() == 1.0, report.table()
    assert sum(r.approvals for r in report.results) >= 40  # the writes went through the real interrupt


async def test_no_check_holds_when_the_model_does_nothing(db: Database, settings: Settings) -> None:
    """Each task's check fails on the demo data alone: none can pass without the task's effects."""
    report = await run_tasks_eval(db, settings, lambda: NOW,
                                  model=lambda _task: TaskFollower(script=[Say("Sure.")]))
    assert [r.task.name for r in report.results if r.done] == []


async def test_the_suite_runs_against_an_openai_compatible_model(
    db: Database, settings: Settings, stub: StubServer
) -> None:
    """The ``--model`` path: the picker is a real OpenAI client, here on the loopback stub."""
    (task,) = [t for t in TASKS if t.name == "reminder-tonight"]
    cfg = settings.model_copy(update={"picker_providers": [
        ProviderSettings(name="local", base_url=stub.base_url, model="local-model")]})
    model = build_model(cfg, "picker", fallback=None)
    assert isinstance(model, BaseChatModel)
    stub.push(tool_call("reminders__create", {"text": "Book a table", "due_at": "2026-11-30T19:00:00+01:00"}),
              text("Your reminder is set for 19:00."))
    try:
        report = await run_tasks_eval(db, cfg, lambda: NOW, tasks=[task], model=lambda _task: model, label="stub")
    finally:
        await close_model(model)
    assert report.share() == 1.0, report.table()
    assert stub.requests[1]["messages"][-1]["role"] == "tool"
