"""A separate OS process that proposes or approves a write on the owner's own servers.

Usage: ``python -m tests.procs.connector STEP OWNER THREAD [APPROVAL_ID]``, with ``STEP`` one of
``propose-send`` (a mail to bob@example.test), ``propose-cancel`` (lists the coming events
and asks to cancel the 2nd event, with the offline picker), ``approve-and-crash-after-sent``
(SIGKILLs itself once the message is sent and saved to Sent, before Tollgate records the
outcome), ``approve-and-crash-after-smtp`` (once the SMTP server took it, before it is saved to
Sent) or ``approve-and-crash-after-put`` (once the CalDAV server stored the change). The
accounts, backends and reach come from the environment. Prints one JSON line with the outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import tollgate.graph._env  # noqa: F401
from tollgate.graph.app import open_app
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tests.fakes import ScriptedModel, call
from tollgate.tools.connectors.caldav import CalDavCalendar
from tollgate.tools.connectors.imap import ImapMailbox
from tollgate.tools.connectors.smtp import Submission

_CRASHES: dict[str, tuple[type, str]] = {
    "approve-and-crash-after-sent": (ImapMailbox, "send"),
    "approve-and-crash-after-smtp": (Submission, "deliver"),
    "approve-and-crash-after-put": (CalDavCalendar, "update"),
}


def _crash_after(cls: type, name: str) -> None:
    """Fault injection: ``cls.<name>`` kills the process once it has returned."""
    original = getattr(cls, name)

    async def then_die(self: Any, *args: Any, **kwargs: Any) -> Any:
        await original(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    setattr(cls, name, then_die)


async def main(argv: list[str]) -> None:
    step, owner, thread = argv[:3]
    if step in _CRASHES:
        _crash_after(*_CRASHES[step])
    ctx = Context(owner_id=owner, timezone="Europe/Paris")
    model = ScriptedModel(steps=[])
    async with open_app(Settings(), picker_model=None if step == "propose-cancel" else model) as app:
        if step == "propose-send":
            model.push(call("mail__send", {"to": ["bob@example.test"], "subject": "Running late", "body": "Ten minutes."}))
            out = await app.runner.send(ctx, thread, "tell bob I'm running late")
        elif step == "propose-cancel":
            await app.runner.send(ctx, thread, "any meetings coming up?")
            out = await app.runner.send(ctx, thread, "cancel the 2nd one")
        else:
            out = await app.runner.decide(ctx, argv[3], {"type": "approve"})
    print(json.dumps({"outcome": out.outcome, "approval_id": out.approval.approval_id if out.approval else None}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
