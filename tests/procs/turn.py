"""A separate OS process that runs one step of a turn against the shared database.

Usage: ``python -m tests.procs.turn propose|approve|approve-and-crash OWNER THREAD [APPROVAL_ID]``.
``DATABASE_URL`` and ``TOLLGATE_APPROVAL_SECRET`` come from the environment. Prints one JSON
line with the outcome. ``approve-and-crash`` SIGKILLs itself right after the write commits,
before the checkpoint is written (a fault injected through the observation hook).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import graph._env  # noqa: F401
from graph.app import open_app
from graph.services import Hooks
from graph.settings import Settings
from graph.state import Context
from tests.fakes import ScriptedModel, call


def _crash(_key: str) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


async def main(argv: list[str]) -> None:
    step, owner, thread = argv[:3]
    ctx = Context(owner_id=owner, timezone="Europe/Paris")
    model = ScriptedModel(steps=[])
    hooks = Hooks(after_effect_commit=_crash) if step == "approve-and-crash" else Hooks()
    async with open_app(Settings(), picker_model=model, hooks=hooks) as app:
        if step == "propose":
            model.push(call("mail__send", {"to": ["sam@example.com"], "subject": "Running late", "body": "Ten minutes."}))
            out = await app.runner.send(ctx, thread, "tell sam I'm running late")
        else:
            out = await app.runner.decide(ctx, argv[3], {"type": "approve"})
    print(json.dumps({
        "pid": os.getpid(),
        "outcome": out.outcome,
        "reply": out.reply,
        "approval_id": out.approval.approval_id if out.approval else None,
    }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
