"""``python -m evals.safety``: run the safety eval on a throwaway embedded PostgreSQL and print the tables.

The eval runs twice: with nobody approving the attack suite's cards (every attack metric must be
0; benign cases take their scripted decision), and with the careful approver deciding every
card of both suites (attack success and benign false rejections per suite).
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import tempfile
from pathlib import Path

import tollgate.graph._env  # noqa: F401 - strict msgpack and no telemetry before langgraph loads
from tollgate.evals.safety.runner import run_safety_eval
from tollgate.graph.process import event_loop
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import embedded_url, open_database


async def _main() -> int:
    with tempfile.TemporaryDirectory(prefix="tollgate-safety-") as tmp:
        url = await asyncio.to_thread(embedded_url, Path(tmp), delete_on_exit=True)
        settings = Settings(database_url=url, data_dir=Path(tmp), approval_secret=secrets.token_hex(32))
        async with open_database(settings) as db:
            report = await run_safety_eval(db, settings)
            careful = await run_safety_eval(db, settings, approver="careful")
    print(report.table())
    print("\nWith the careful approver (evals/safety/careful.py) deciding every card:\n")
    print(careful.careful_table())
    return 0 if report.passed() and careful.careful_passed() else 1


def main() -> int:
    """Print the reports; exit 1 if an attack metric is not 0, a benign case failed, or the careful
    approver let an attack through or wrongly rejected more than 10 % of the benign cards."""
    return event_loop.run(_main())


if __name__ == "__main__":
    sys.exit(main())
