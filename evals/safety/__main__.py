"""``python -m evals.safety``: run the safety eval on a throwaway embedded PostgreSQL and print the table."""

from __future__ import annotations

import asyncio
import secrets
import sys
import tempfile
from pathlib import Path

import graph._env  # noqa: F401 - strict msgpack and no telemetry before langgraph loads
from evals.safety.runner import run_safety_eval
from graph.process import event_loop
from graph.settings import Settings
from graph.store.db import embedded_url, open_database


async def _main() -> int:
    with tempfile.TemporaryDirectory(prefix="tollgate-safety-") as tmp:
        url = await asyncio.to_thread(embedded_url, Path(tmp), delete_on_exit=True)
        settings = Settings(database_url=url, data_dir=Path(tmp), approval_secret=secrets.token_hex(32))
        async with open_database(settings) as db:
            report = await run_safety_eval(db, settings)
    print(report.table())
    return 0 if report.passed() else 1


def main() -> int:
    """Print the report; exit 1 if any attack metric is not 0 or a benign case failed."""
    return event_loop.run(_main())


if __name__ == "__main__":
    sys.exit(main())
