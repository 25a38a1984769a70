"""A separate OS process that proposes or approves a mail send on the owner's IMAP and SMTP account.

Usage: ``python -m tests.procs.mail STEP OWNER THREAD [APPROVAL_ID]``, with ``STEP`` ``propose``,
``approve-and-crash-after-sent`` (SIGKILLs itself once the message is sent and saved to Sent,
before Tollgate records the outcome) or ``approve-and-crash-after-smtp`` (once the SMTP server
took it, before it is saved to Sent). The account, backend and reach come from the environment.
Prints one JSON line with the outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import graph._env  # noqa: F401
from graph.app import open_app
from graph.settings import Settings
from graph.state import Context
from tests.fakes import ScriptedModel, call
from tools.connectors.imap import ImapMailbox


def _crash_after(name: str) -> None:
    """Fault injection: ``ImapMailbox.<name>`` kills the process once it has returned."""
    original = getattr(ImapMailbox, name)

    async def then_die(self: ImapMailbox, *args: Any, **kwargs: Any) -> Any:
        await original(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    setattr(ImapMailbox, name, then_die)


async def main(argv: list[str]) -> None:
    step, owner, thread = argv[:3]
    if step == "approve-and-crash-after-sent":
        _crash_after("send")
    elif step == "approve-and-crash-after-smtp":
        _crash_after("_deliver")
    ctx = Context(owner_id=owner, timezone="Europe/Paris")
    model = ScriptedModel(steps=[])
    async with open_app(Settings(), picker_model=model) as app:
        if step == "propose":
            model.push(call("mail__send", {"to": ["bob@example.test"], "subject": "Running late", "body": "Ten minutes."}))
            out = await app.runner.send(ctx, thread, "tell bob I'm running late")
        else:
            out = await app.runner.decide(ctx, argv[3], {"type": "approve"})
    print(json.dumps({"outcome": out.outcome, "approval_id": out.approval.approval_id if out.approval else None}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
