"""Tollgate's command line (typer + rich): ``tollgate chat | serve | worker | migrate``.

* ``chat`` is a terminal chat as one owner: it seeds the demo data for that owner (only if they
  have none), streams each turn's events, and asks for approvals inline (approve, edit the
  arguments as JSON, or reject with a message).
* ``serve`` runs the HTTP server (``server.py``) on a host and port; with ``--demo`` it first
  seeds the ``demo`` owner, issues a bearer token for it and prints the URL and the token
  (``make run``); it runs one background worker in the same process unless ``--no-worker``.
* ``worker`` runs a background-run worker; ``migrate`` applies the database migrations.

Every command reads the same settings (environment or ``.env``) as the server and Studio.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Annotated, Any, Final

import graph._env  # noqa: F401  - strict msgpack and no telemetry before langgraph loads
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.prompt import Prompt
from rich.text import Text

from graph import event_loop
from graph.settings import Settings

if TYPE_CHECKING:
    from graph.app import App
    from graph.events import TurnEvent
    from graph.state import Context

# The graph, models and database are imported inside each command, so `tollgate --help` is instant.

__all__ = ["cli", "main"]

_HELP: Final = "Type a request (e.g. “what's on my calendar today?”, then “cancel the 2nd one”). Ctrl-D or /quit exits."
_QUIT: Final = frozenset({"/quit", "/exit"})
# A UUID, so `langgraph dev` (which addresses threads by UUID) can open the CLI's threads too.
_CLI_THREADS: Final = uuid.UUID("6f1d3c2e-6a57-4b0e-9a4c-3b7f0c2d9e11")
_DEMO_OWNER: Final = "demo"

cli = typer.Typer(
    name="tollgate",
    help="Tollgate: a governed tool-calling runtime. The model chooses tool calls; the server decides what runs.",
    no_args_is_help=True,
    add_completion=False,
    # Locals can hold the approval secret or a bearer token: never print them in a traceback.
    pretty_exceptions_show_locals=False,
)
"""The ``tollgate`` command (a typer app)."""

_out = Console(highlight=False)
_err = Console(stderr=True, highlight=False)


def _settings() -> Settings:
    """The settings, or exit 2 naming what is wrong (never the values: they may be secrets)."""
    try:
        return Settings()
    except ValidationError as exc:
        for error in exc.errors(include_input=False, include_url=False):
            where = ".".join(str(part) for part in error["loc"]) or "settings"
            _err.print(f"invalid configuration ({where}): {error['msg']}", style="red")
        raise typer.Exit(2) from None


# --- chat -------------------------------------------------------------------------------------


class _Turn:
    """Renders one run's events; remembers the approval request the run stopped on, if any."""

    def __init__(self) -> None:
        self.waiting: TurnEvent | None = None
        self._streamed = ""
        self._live: Live | None = None

    def _stop_stream(self) -> None:
        if self._live is not None:
            self._live.stop()  # transient: the final reply replaces the streamed draft
            self._live = None
        self._streamed = ""

    def show(self, event: TurnEvent) -> None:
        data = event["data"]
        kind = event["type"]
        if kind == "token_delta":
            self._streamed += str(data.get("text", ""))
            if self._live is None:
                self._live = Live(Text(self._streamed, style="dim"), console=_out, transient=True)
                self._live.start()
            else:
                self._live.update(Text(self._streamed, style="dim"))
            return
        if kind == "tool_start":
            _out.print(f"  · running {data['tool']}.{data['action']}", style="dim")
        elif kind == "tool_end" and data.get("status") != "ok":
            _out.print(f"  · {data['tool']}.{data['action']} failed ({data.get('code')})", style="yellow")
        elif kind == "approval_decided":
            _out.print(f"  · approval: {data.get('decision')}", style="dim")
        elif kind == "message_complete":
            self._stop_stream()
            _out.print(Text.assemble(("tollgate> ", "bold cyan"), str(data["text"])))
        elif kind == "approval_required":
            self._stop_stream()
            actions = _actions_of(data)
            for number, action in enumerate(actions, 1):
                origins = [(f"\n{field}: {said}", "yellow" if "someone else" in said else "dim")
                           for field, said in (action.get("provenance") or {}).items()]
                body = Text.assemble(
                    (str(action["preview"]), "bold"),
                    "\n",
                    (f"{action['tool']}.{action['action']} {json.dumps(action['args'], ensure_ascii=False)}", "dim"),
                    *origins,
                    "\n",
                    (f"expires {data['expires_at']}", "dim"),
                )
                title = "needs your approval" + (f" ({number} of {len(actions)})" if len(actions) > 1 else "")
                _out.print(Panel(body, title=title, title_align="left", border_style="yellow"))
            self.waiting = event

    async def play(self, events: AsyncIterator[TurnEvent]) -> TurnEvent | None:
        """Render every event; return the approval request the run stopped on, or ``None``."""
        try:
            async for event in events:
                self.show(event)
        finally:
            self._stop_stream()
        return self.waiting


async def _ask(prompt: str, *, choices: list[str] | None = None) -> str:
    """Read a line without blocking the event loop (EOFError on Ctrl-D); re-ask until it is a choice."""
    text = Text(prompt, style="bold")
    if choices is None:
        return await asyncio.to_thread(_out.input, text)
    answer: str = await asyncio.to_thread(Prompt.ask, text, console=_out, choices=choices, show_choices=False)
    return answer


async def _edited_args(current: dict[str, Any]) -> dict[str, Any] | None:
    """Ask for new arguments as a JSON object; ``None`` (an empty line) goes back to the choice."""
    _out.print(f"current arguments: {json.dumps(current, ensure_ascii=False)}", style="dim")
    while True:
        raw = (await _ask("new arguments as JSON (empty to go back): ")).strip()
        if not raw:
            return None
        try:
            args = json.loads(raw)
        except json.JSONDecodeError:
            _out.print("that is not JSON; try again", style="yellow")
            continue
        if isinstance(args, dict):
            return args
        _out.print("the arguments must be a JSON object; try again", style="yellow")


def _actions_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The actions of an ``approval_required`` event (one, for a request of one action)."""
    return list(data.get("actions") or [
        {"approval_id": data["approval_id"], "tool": data["tool"], "action": data["action"],
         "preview": data["preview"], "args": data["args"]}])


_CHOICES: Final = {"approve": ("a", "[a]pprove"), "edit": ("e", "[e]dit"), "reject": ("r", "[r]eject")}


async def _one_decision(action: dict[str, Any], label: str) -> dict[str, Any]:
    allowed = [d for d in action.get("allowed_decisions") or ("approve", "edit", "reject") if d in _CHOICES]
    prompt = f"{label}? " + " / ".join(_CHOICES[d][1] for d in allowed)
    while True:
        answer = await _ask(prompt, choices=[_CHOICES[d][0] for d in allowed])
        if answer == "a":
            return {"type": "approve"}
        if answer == "r":
            why = (await _ask("reason (optional): ")).strip()
            return {"type": "reject", "message": why} if why else {"type": "reject"}
        args = await _edited_args(action["args"])
        if args is not None:
            return {"type": "edit", "edited_action": {"name": f"{action['tool']}__{action['action']}", "args": args}}


async def _decision(event: TurnEvent) -> dict[str, Any] | list[dict[str, Any]]:
    """Ask the person for a decision on each action of ``event``'s approval request, in order.

    Edited arguments are sent as typed: the server checks them like the model's (schema, ids,
    DLP) and shows the edited call again as a new approval.
    """
    actions = _actions_of(event["data"])
    if len(actions) == 1:
        return await _one_decision(actions[0], "approve")
    return [await _one_decision(a, f"approve {n} of {len(actions)}") for n, a in enumerate(actions, 1)]


async def _seed(app: App, owner: str, timezone: str) -> None:
    from tools.demo import seed_demo

    async with app.services.db.pool.connection() as conn, conn.transaction():
        await seed_demo(conn, owner, app.services.clock(), timezone)


async def _exchange(app: App, ctx: Context, thread: str, line: str) -> None:
    """One user message and every approval it leads to.

    A decision the server refuses (an edit that fails its checks) leaves the request pending:
    the refusal is shown and the same request is asked again.
    """
    from policies.errors import TollgateError

    waiting = await _Turn().play(app.runner.stream(ctx, thread, line))
    while waiting is not None:
        decision = await _decision(waiting)
        try:
            waiting = await _Turn().play(app.runner.stream_decision(ctx, waiting["data"]["approval_id"], decision))
        except TollgateError as exc:
            if exc.code not in ("invalid_args", "off_list_id", "egress_denied"):
                raise
            _out.print(f"  · not accepted ({exc.code}): {exc.message}; the request is still pending", style="yellow")


async def run_chat(settings: Settings, owner: str, thread: str, timezone: str, *, demo_data: bool) -> None:
    """The terminal chat loop, as ``owner`` on ``thread`` (seeding the demo data first if asked)."""
    from graph.app import open_app
    from graph.state import Context
    from policies.errors import TollgateError

    ctx = Context(owner_id=owner, timezone=timezone, channel="cli")
    async with open_app(settings) as app:
        if demo_data:
            await _seed(app, owner, timezone)
        _out.print(f"Tollgate — chatting as [bold]{owner}[/] on thread [bold]{thread}[/]. {_HELP}")
        while True:
            try:
                line = (await _ask("you> ")).strip()
            except EOFError:
                _out.print()
                return
            if line in _QUIT:
                return
            if not line:
                continue
            try:
                await _exchange(app, ctx, thread, line)
            except TollgateError as exc:
                _out.print(f"tollgate> refused ({exc.code}): {exc.message}", style="red")
            except EOFError:
                _out.print()
                return


@cli.command()
def chat(
    owner: Annotated[str, typer.Option(help="The owner to chat as.")] = _DEMO_OWNER,
    thread: Annotated[str | None, typer.Option(help="Thread id; default: the owner's CLI thread (a UUID).")] = None,
    timezone: Annotated[str | None, typer.Option(help="IANA timezone; default TOLLGATE_DEFAULT_TIMEZONE.")] = None,
    demo_data: Annotated[bool | None, typer.Option(
        help="Seed the demo data set for an owner who has no data yet; default on, except in production.",
    )] = None,
) -> None:
    """Chat in the terminal; write actions ask for your approval inline."""
    from graph.state import Context

    settings = _settings()
    zone = timezone or settings.default_timezone
    try:
        Context(owner_id=owner, timezone=zone)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    seed = settings.environment != "production" if demo_data is None else demo_data
    try:
        event_loop.run(run_chat(settings, owner, thread or str(uuid.uuid5(_CLI_THREADS, owner)), zone, demo_data=seed))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


# --- serve ------------------------------------------------------------------------------------


async def _demo_token(settings: Settings) -> str:
    """Seed the demo owner and issue a fresh bearer token for it."""
    from graph.db import open_database
    from graph.services import utc_now
    from tools.demo import seed_demo
    from web.auth import ensure_demo_token

    async with open_database(settings) as db:
        async with db.pool.connection() as conn, conn.transaction():
            await seed_demo(conn, _DEMO_OWNER, utc_now(), settings.default_timezone)
        return await ensure_demo_token(db, owner=_DEMO_OWNER)


async def _serve(settings: Settings, host: str, port: int, *, worker: bool) -> None:
    import uvicorn

    from graph.app import open_app
    from server import create_app
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host=host, port=port, log_level="info"))
    async with AsyncExitStack() as stack:
        if worker:
            from graph.background.worker import start_in_process_worker

            handle = await start_in_process_worker(await stack.enter_async_context(open_app(settings)))
            stack.push_async_callback(handle.stop)
        await server.serve()


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8000,
    demo: Annotated[bool, typer.Option(help="Seed the `demo` owner and print a bearer token for it.")] = False,
    worker: Annotated[bool, typer.Option(help="Run one background worker in this process.")] = True,
) -> None:
    """Run the HTTP server (chat over SSE, approvals, the web page at /)."""
    settings = _settings()
    if demo and settings.environment == "production":
        raise typer.BadParameter("--demo issues a demo token; it is refused in production")
    if demo:
        token = event_loop.run(_demo_token(settings))
        url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/"
        # One value per line, never wrapped, so both can be copied as they are.
        _out.print(Text.assemble("Tollgate: ", (url, "bold cyan")), soft_wrap=True)
        _out.print(Text.assemble("demo token (owner `demo`): ", (token, "bold")), soft_wrap=True)
        # The token rides in the fragment: a browser never sends it, so no access log records it.
        _out.print(Text.assemble("open: ", (f"{url}#token={token}", "bold cyan")), soft_wrap=True)
        _out.print(f"or paste the token at {url}, or: curl -N -H 'Authorization: Bearer {token}' "
                   f"-H 'Content-Type: application/json' -d '{{\"message\": \"what is on my calendar today?\"}}' "
                   f"{url}v1/chat", style="dim", soft_wrap=True)
    try:
        event_loop.run(_serve(settings, host, port, worker=worker))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


# --- worker, migrate --------------------------------------------------------------------------


@cli.command()
def worker(
    concurrency: Annotated[int | None, typer.Option(min=1, max=32, help="Runs at once; default TOLLGATE_WORKER_CONCURRENCY.")] = None,
    name: Annotated[str, typer.Option(help="Worker name, in its logs.")] = "tollgate-worker",
) -> None:
    """Run a background-run worker until SIGINT/SIGTERM (running runs finish first, bounded)."""
    from graph.background.worker import run_worker

    try:
        event_loop.run(run_worker(_settings(), concurrency=concurrency, name=name))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


async def run_migrate(settings: Settings) -> None:
    """Apply our migrations, the checkpointer's and the job queue's."""
    from graph.background.queue import ensure_queue_schema
    from graph.checkpointer import open_checkpointer
    from graph.db import open_database

    async with open_database(settings) as db:
        await open_checkpointer(db)
        await ensure_queue_schema(db)


# --- credentials -------------------------------------------------------------------------------

credentials = typer.Typer(help="Owners' secrets for tools (API tokens, passwords), stored encrypted.", no_args_is_help=True)
cli.add_typer(credentials, name="credentials")


async def _credential_store(settings: Settings, use: Callable[[Any], Awaitable[None]]) -> None:
    from graph.credentials import CredentialStore, credentials_cipher
    from graph.db import open_database

    async with open_database(settings) as db:
        await use(CredentialStore(db.pool, credentials_cipher(settings, settings.approval_key())))


@credentials.command("set")
def credentials_set(
    name: Annotated[str, typer.Argument(help="The secret's name, as the tool reads it (api_token...).")],
    owner: Annotated[str, typer.Option(help="The owner it belongs to.")],
    tool: Annotated[str, typer.Option(help="The tool that may read it.")],
) -> None:
    """Store a secret, read from standard input (never from the command line, where `ps` would show it)."""
    from policies.errors import TollgateError

    value = sys.stdin.readline().rstrip("\n") if not sys.stdin.isatty() else typer.prompt("value", hide_input=True)
    try:
        event_loop.run(_credential_store(_settings(), lambda store: store.set(owner, tool, name, value)))
    except (ValueError, TollgateError) as exc:
        _err.print(f"not stored: {getattr(exc, 'message', exc)}", style="red")
        raise typer.Exit(2) from None
    _out.print(f"stored {tool}/{name} for {owner}")


@credentials.command("list")
def credentials_list(owner: Annotated[str, typer.Option(help="The owner.")]) -> None:
    """The names of the owner's stored secrets (never their values)."""
    found: list[tuple[str, str]] = []

    async def names(store: Any) -> None:
        found.extend(await store.names(owner))

    event_loop.run(_credential_store(_settings(), names))
    for tool, name in found:
        _out.print(f"{tool}/{name}")


@credentials.command("delete")
def credentials_delete(
    name: Annotated[str, typer.Argument(help="The secret's name.")],
    owner: Annotated[str, typer.Option(help="The owner it belongs to.")],
    tool: Annotated[str, typer.Option(help="The tool it belongs to.")],
) -> None:
    """Forget a secret."""
    gone: list[bool] = []

    async def delete(store: Any) -> None:
        gone.append(await store.delete(owner, tool, name))

    event_loop.run(_credential_store(_settings(), delete))
    _out.print(f"deleted {tool}/{name}" if gone[0] else f"{owner} has no {tool}/{name}")


@cli.command()
def migrate() -> None:
    """Apply the database migrations (ours, the checkpointer's, the job queue's) and exit."""
    event_loop.run(run_migrate(_settings()))
    _out.print("migrations applied")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``tollgate`` command."""
    cli(args=argv, prog_name="tollgate")


if __name__ == "__main__":
    main()
