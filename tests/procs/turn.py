"""A separate OS process that runs one step of a turn against the shared database.

Usage: ``python -m tests.procs.turn STEP OWNER THREAD [APPROVAL_ID]``, with ``STEP`` one of
``propose``, ``approve``, ``read``, ``approve-and-crash`` (SIGKILLs itself right after the write
commits, before the checkpoint is written), ``approve-and-hang`` (stops inside the effect's
transaction, before the executor, until killed) and ``read-and-hang`` (stops in its model call
until killed). ``approve-and-hang+logged`` runs as the HTTP server runs it, through the turn hub,
which records its events in the thread's event log. ``DATABASE_URL``,
``TOLLGATE_APPROVAL_SECRET`` and the lease time come from the environment. Prints ``hanging`` when it has stopped, else one JSON line with the outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from collections.abc import AsyncIterator

import tollgate.graph._env  # noqa: F401
from tollgate.graph.app import App, open_app
from tollgate.graph.events import TurnEvent
from tollgate.graph.services import Hooks
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tests.fakes import ScriptedModel, call, say
from tollgate.web.hub import TurnHub


def _crash(_key: str) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


async def _hang(_key: str) -> None:
    print("hanging", flush=True)
    await asyncio.sleep(3600)


def _hooks(step: str) -> Hooks:
    if step == "approve-and-crash":
        return Hooks(after_effect_commit=_crash)
    if step == "approve-and-hang":
        return Hooks(inside_effect=_hang)
    return Hooks()


async def _logged(app: App, owner: str, thread: str, events: AsyncIterator[TurnEvent]) -> None:
    """Run ``events`` as the server does: detached, through the hub that records them."""
    hub = TurnHub(app.services.db, idle_seconds=120)
    run, _first = await hub.start(owner, thread, events)
    await run.done.wait()


async def main(argv: list[str]) -> None:
    step, owner, thread = argv[:3]
    step, logged = step.removesuffix("+logged"), step.endswith("+logged")
    ctx = Context(owner_id=owner, timezone="Europe/Paris")
    model = ScriptedModel(steps=[], latency=3600 if step == "read-and-hang" else 0)
    async with open_app(Settings(), picker_model=model, hooks=_hooks(step)) as app:
        if logged:  # approve-and-hang+logged
            await _logged(app, owner, thread, app.runner.stream_decision(ctx, argv[3], {"type": "approve"}))
            return
        if step == "propose":
            model.push(call("mail__send", {"to": ["sam@example.com"], "subject": "Running late", "body": "Ten minutes."}))
            out = await app.runner.send(ctx, thread, "tell sam I'm running late")
        elif step in ("read", "read-and-hang"):
            model.push(call("calendar__list", {"range": "today"}), say(""))
            if step == "read-and-hang":
                print("hanging", flush=True)
            out = await app.runner.send(ctx, thread, "what's on my calendar today?")
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
