"""``python -m evals.tasks [--model]``: the tasks eval on a throwaway embedded PostgreSQL.

Without ``--model`` each task is played by a model that follows it (the runtime is measured).
With ``--model`` the picker configured in the environment (``TOLLGATE_PICKER_PROVIDERS``, or
``OPENAI_BASE_URL`` + ``TOLLGATE_PICKER_MODEL``) plays every task from its request alone, every
write approved, and the same checks judge it; with no model configured it says so and skips.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import tollgate.graph._env  # noqa: F401 - strict msgpack and no telemetry before langgraph loads
from tollgate.evals.tasks.runner import run_tasks_eval
from tollgate.graph.models.llm import build_model, close_model
from tollgate.graph.process import event_loop
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import embedded_url, open_database

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=ZoneInfo("Europe/Paris"))
"""The demo data's "now": every task's dates are written against it."""


async def _main(use_model: bool) -> int:
    with tempfile.TemporaryDirectory(prefix="tollgate-tasks-") as tmp:
        url = await asyncio.to_thread(embedded_url, Path(tmp), delete_on_exit=True)
        settings = Settings(database_url=url, data_dir=Path(tmp), approval_secret=secrets.token_hex(32))
        configured = build_model(settings, "picker", fallback=None) if use_model else None
        if use_model and configured is None:
            print("tasks eval against a model: skipped, no OpenAI-compatible picker is configured "
                  "(set TOLLGATE_PICKER_PROVIDERS, or OPENAI_BASE_URL and TOLLGATE_PICKER_MODEL)")
            return 0
        async with open_database(settings) as db:
            try:
                report = await run_tasks_eval(
                    db, settings, lambda: NOW,
                    model=(lambda _task: configured) if configured is not None else None,  # type: ignore[arg-type, return-value]
                    label="the configured picker model" if configured is not None else "",
                )
            finally:
                await close_model(configured)
    print(report.table())
    return 0 if configured is not None or report.share() == 1.0 else 1


def main(argv: list[str] | None = None) -> int:
    """Print the report; with the scripted follower, exit 1 unless every task is done."""
    parser = argparse.ArgumentParser(prog="python -m evals.tasks")
    parser.add_argument("--model", action="store_true", help="play the tasks with the configured picker model")
    return event_loop.run(_main(parser.parse_args(argv).model))


if __name__ == "__main__":
    sys.exit(main())
