"""A separate OS process that proposes or approves a remote payment (tests/remote_service.py).

Usage: ``python -m tests.procs.remote STEP OWNER THREAD SERVICE_URL [APPROVAL_ID]``, with ``STEP``
``propose`` or ``approve-and-crash`` (the tool SIGKILLs the process right after the payment is
made, before its outcome is recorded). Prints one JSON line with the outcome.
"""

from __future__ import annotations

import asyncio
import json
import sys

import tollgate.graph._env  # noqa: F401
from tollgate.graph.app import open_app
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tests.fakes import ScriptedModel, call
from tests.remote_service import payments_tool


async def main(argv: list[str]) -> None:
    step, owner, thread, url = argv[:4]
    ctx = Context(owner_id=owner, timezone="Europe/Paris")
    model = ScriptedModel(steps=[])
    tool = payments_tool(url, crash_after_call=step == "approve-and-crash")
    async with open_app(Settings(), picker_model=model, tools=[tool]) as app:
        if step == "propose":
            model.push(call("payments__pay", {"to": "sam", "amount_cents": 500}))
            out = await app.runner.send(ctx, thread, "pay sam 5 euros")
        else:
            out = await app.runner.decide(ctx, argv[4], {"type": "approve"})
    print(json.dumps({"outcome": out.outcome, "approval_id": out.approval.approval_id if out.approval else None}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
