"""Tollgate's command line: ``tollgate chat`` (a terminal chat with inline approvals) and ``tollgate migrate``.

``make run`` runs ``tollgate chat``: it starts the embedded PostgreSQL when ``DATABASE_URL`` is
unset, applies migrations, seeds demo data for the ``demo`` owner and opens the chat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import graph._env  # noqa: F401  - before langgraph is imported
from graph.app import App, open_app
from graph.db import open_database
from graph.events import TurnEvent
from graph.settings import Settings
from graph.state import Context
from policies.errors import TollgateError
from tools.demo import seed_demo

__all__ = ["main"]

_HELP = "Type a request (e.g. “what's on my calendar today?”, “cancel the 2nd one”). Ctrl-D or /quit exits."


async def _print_events(events: AsyncIterator[TurnEvent], out: Callable[[str], None]) -> TurnEvent | None:
    """Print a run's events; return the approval request if the run stopped for one."""
    waiting: TurnEvent | None = None
    async for event in events:
        data = event["data"]
        if event["type"] == "tool_start":
            out(f"  · running {data['tool']}.{data['action']}")
        elif event["type"] == "tool_end" and data.get("status") != "ok":
            out(f"  · {data['tool']}.{data['action']} failed ({data.get('code')})")
        elif event["type"] == "message_complete":
            out(f"tollgate> {data['text']}")
        elif event["type"] == "approval_required":
            out(f"tollgate> Needs your approval: {data['preview']}")
            out(f"          (expires {data['expires_at']})")
            waiting = event
    return waiting


async def _ask_decision(read: Callable[[str], str], out: Callable[[str], None], event: TurnEvent) -> dict[str, Any]:
    while True:
        answer = (await asyncio.to_thread(read, "approve? [a]pprove / [e]dit / [r]eject: ")).strip().lower()
        if answer in ("a", "approve", "y", "yes"):
            return {"type": "approve"}
        if answer in ("r", "reject", "n", "no"):
            why = await asyncio.to_thread(read, "reason (optional): ")
            return {"type": "reject", "message": why.strip() or None}
        if answer in ("e", "edit"):
            out(f"current arguments: {json.dumps(event['data']['args'])}")
            raw = await asyncio.to_thread(read, "new arguments as JSON: ")
            try:
                args = json.loads(raw)
            except json.JSONDecodeError:
                out("that is not JSON; try again")
                continue
            name = f"{event['data']['tool']}__{event['data']['action']}"
            return {"type": "edit", "edited_action": {"name": name, "args": args}}


async def chat(settings: Settings, owner: str, thread: str, *, read: Callable[[str], str] = input,
               out: Callable[[str], None] = print) -> None:
    """The terminal chat loop."""
    async with open_app(settings) as app:
        await _seed(app, owner, settings)
        ctx = Context(owner_id=owner, timezone=settings.default_timezone, channel="cli")
        out(f"Tollgate — chatting as {owner!r} on thread {thread!r}. {_HELP}")
        while True:
            try:
                line = await asyncio.to_thread(read, "you> ")
            except EOFError:
                out("")
                return
            if line.strip() in ("/quit", "/exit"):
                return
            if not line.strip():
                continue
            try:
                waiting = await _print_events(app.runner.stream(ctx, thread, line), out)
                while waiting is not None:
                    decision = await _ask_decision(read, out, waiting)
                    waiting = await _print_events(
                        app.runner.stream_decision(ctx, waiting["data"]["approval_id"], decision), out
                    )
            except TollgateError as exc:
                out(f"tollgate> refused ({exc.code}): {exc.message}")
            except EOFError:
                return


async def _seed(app: App, owner: str, settings: Settings) -> None:
    async with app.services.db.pool.connection() as conn, conn.transaction():
        await seed_demo(conn, owner, app.services.clock(), settings.default_timezone)


async def migrate(settings: Settings) -> None:
    """Apply migrations (ours and the checkpointer's) and exit."""
    from graph.checkpointer import open_checkpointer

    async with open_database(settings) as db:
        await open_checkpointer(db)
    print("migrations applied")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``tollgate`` command."""
    parser = argparse.ArgumentParser(prog="tollgate", description="Governed tool-calling runtime.")
    sub = parser.add_subparsers(dest="command")
    chat_cmd = sub.add_parser("chat", help="chat in the terminal, approving inline")
    chat_cmd.add_argument("--owner", default="demo")
    chat_cmd.add_argument("--thread", default=None)
    sub.add_parser("migrate", help="apply database migrations")
    args = parser.parse_args(argv)
    settings = Settings()
    if args.command == "migrate":
        asyncio.run(migrate(settings))
        return
    owner = getattr(args, "owner", "demo")
    thread = getattr(args, "thread", None) or f"cli:{owner}"
    try:
        asyncio.run(chat(settings, owner, thread))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
