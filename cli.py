"""Tollgate's command line (typer + rich): ``tollgate chat | serve | worker | migrate``.

* ``chat`` is a terminal chat as one owner: it seeds the demo data for that owner (only if they
  have none), streams each turn's events, and asks for approvals inline (approve, edit the
  arguments as JSON, or reject with a message).
* ``serve`` runs the HTTP server (``server.py``) on a host and port; with ``--demo`` it first
  seeds the ``demo`` owner, issues a bearer token for it and prints the URL and the token
  (``make run``); it runs one background worker in the same process unless ``--no-worker``.
* ``worker`` runs a background-run worker; ``migrate`` applies the database migrations.
* ``token create | list | revoke`` manages owners' bearer tokens (hashes only at rest);
  ``db status | stop | reset`` the embedded PostgreSQL; ``credentials`` owners' tool secrets.

Every command reads the same settings (environment or ``.env``) as the server and Studio. A
configuration error is one or two sentences naming the variable (exit 2); ``--debug`` shows
the traceback instead.
"""

from __future__ import annotations

import asyncio
import errno
import importlib.metadata
import json
import os
import socket
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, TypeVar

import tollgate.graph._env  # noqa: F401  - strict msgpack and no telemetry before langgraph loads
import typer
from pydantic import ValidationError
from pydantic_settings import SettingsError
from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.prompt import Prompt
from rich.text import Text

from tollgate.graph.process import event_loop
from tollgate.graph.settings import Settings, misspelt_variables

if TYPE_CHECKING:
    from tollgate.graph.app import App
    from tollgate.graph.events import TurnEvent
    from tollgate.graph.state import Context

# The graph, models and database are imported inside each command, so `tollgate --help` is instant.

__all__ = ["cli", "main"]

_HELP: Final = "Type a request (e.g. “what's on my calendar today?”, then “cancel the 2nd one”); /help for commands."
_COMMANDS: Final = """\
/help            this list
/new             start a new thread
/threads         your recent threads, numbered
/open N | ID     continue thread N of /threads, or the thread with that id
/history [N]     the last N messages of this thread (default 20)
/quit            leave (so do Ctrl-D and Ctrl-C)"""
_QUIT: Final = frozenset({"/quit", "/exit"})
_SHOWN_ON_START: Final = 6  # messages of the thread shown when the chat opens it again
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

# Output read by a program (a pipe, a file) is not wrapped at 80 columns: a path or a token stays on one line.
_out = Console(highlight=False, soft_wrap=not sys.stdout.isatty())
_err = Console(stderr=True, highlight=False, soft_wrap=not sys.stderr.isatty())
_T = TypeVar("_T")
_debug: list[bool] = [False]  # set by --debug (typer's callback has no other place to keep it)


def _version(shown: bool) -> None:
    if shown:
        _out.print(f"tollgate {importlib.metadata.version('tollgate')}")
        raise typer.Exit(0)


@cli.callback()
def _options(
    debug: Annotated[bool, typer.Option("--debug", help="Show the traceback of a start-up error.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    _debug[0] = debug
    for warning in misspelt_variables(os.environ):  # a typo would silently leave a setting at its default
        _err.print(f"warning: {warning}", style="yellow", soft_wrap=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    _err.print(message, style="red", soft_wrap=True)
    return typer.Exit(code)


def _explained(exc: BaseException) -> typer.Exit:
    """Exit 2 with the sentence for a configuration error; re-raise anything else (or everything with --debug)."""
    from tollgate.graph.process.config_errors import explain

    message = explain(exc)
    if message is None or _debug[0]:
        raise exc
    return _fail(message)


def _settings() -> Settings:
    """The settings, or exit 2 naming the variable that is wrong (never the values: they may be secrets)."""
    try:
        return Settings()
    except (ValidationError, SettingsError) as exc:
        raise _explained(exc) from None


def _observed(settings: Settings) -> None:
    """A long-running process's logs (``TOLLGATE_LOG_FORMAT``, ``TOLLGATE_LOG_LEVEL``) and traces (``OTEL_*``)."""
    from tollgate.graph.observe.logs import configure_logging
    from tollgate.graph.observe.tracing import configure_tracing

    configure_logging(settings.log_format, settings.log_level)
    configure_tracing()


def _run(main: Coroutine[Any, Any, _T]) -> _T:
    """Run a command's coroutine: Ctrl-C exits 130 at once, a configuration error exits 2 with its sentence."""
    try:
        return event_loop.run(main)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except Exception as exc:
        raise _explained(exc) from None


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


async def _in_daemon_thread(read: Callable[[], _T]) -> _T:
    """Run a blocking terminal read in a daemon thread and await it.

    Not ``asyncio.to_thread``: the loop's executor joins its threads on the way out, so Ctrl-C
    would wait for the next Enter. A daemon thread blocked in ``input()`` never holds up exit.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[_T] = loop.create_future()

    def settle(result: Any, failed: bool) -> None:
        if not done.done():
            (done.set_exception if failed else done.set_result)(result)

    def run() -> None:
        try:
            result: Any = read()
        except BaseException as exc:  # EOFError on Ctrl-D, KeyboardInterrupt: the awaiting task decides
            loop.call_soon_threadsafe(settle, exc, True)
        else:
            loop.call_soon_threadsafe(settle, result, False)

    threading.Thread(target=run, name="tollgate-input", daemon=True).start()
    return await done


async def _ask(prompt: str, *, choices: list[str] | None = None) -> str:
    """Read a line without blocking the event loop (EOFError on Ctrl-D); re-ask until it is a choice."""
    text = Text(prompt, style="bold")
    if choices is None:
        return await _in_daemon_thread(lambda: _out.input(text))
    answer: str = await _in_daemon_thread(
        lambda: Prompt.ask(text, console=_out, choices=choices, show_choices=False))
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
    from tollgate.graph.store.owner_scope import owner_transaction
    from tollgate.tools.demo import seed_demo

    async with owner_transaction(app.services.db.pool, owner) as conn:
        await seed_demo(conn, owner, app.services.clock(), timezone)


async def _exchange(app: App, ctx: Context, thread: str, line: str) -> None:
    """One user message and every approval it leads to.

    A decision the server refuses (an edit that fails its checks) leaves the request pending:
    the refusal is shown and the same request is asked again.
    """
    from tollgate.policies.errors import TollgateError

    waiting = await _Turn().play(app.runner.stream(ctx, thread, line))
    while waiting is not None:
        decision = await _decision(waiting)
        try:
            waiting = await _Turn().play(app.runner.stream_decision(ctx, waiting["data"]["approval_id"], decision))
        except TollgateError as exc:
            if exc.code not in ("invalid_args", "off_list_id", "egress_denied"):
                raise
            _out.print(f"  · not accepted ({exc.code}): {exc.message}; the request is still pending", style="yellow")


class _Chat:
    """The terminal chat's session: the open app, the owner's context and the thread it is on."""

    def __init__(self, app: App, ctx: Context, thread: str) -> None:
        self.app = app
        self.ctx = ctx
        self.thread = thread
        self._listed: list[str] = []  # the thread ids /threads printed, for /open N

    async def history(self, limit: int, *, heading: str | None = None) -> None:
        """The thread's last ``limit`` messages; with a ``heading``, printed above them, and nothing for none."""
        from tollgate.web.store import transcript

        messages = await transcript(self.app.services.db, self.thread, limit)
        if heading is not None and messages:
            _out.print(heading, style="dim")
        for m in messages:
            # Not "you> ": a message shown again must not look like the prompt.
            who = ("  you: ", "bold") if m.role == "user" else ("  tollgate: ", "bold cyan")
            _out.print(Text.assemble(who, (m.content, "" if m.role == "user" else "dim")), soft_wrap=True)
        if not messages and heading is None:
            _out.print("nothing in this thread yet", style="dim")

    async def threads(self) -> None:
        from tollgate.web.store import list_threads

        found = await list_threads(self.app.services.db, self.ctx.owner_id, 10, "chat")
        self._listed = [t.thread_id for t in found]
        for number, t in enumerate(found, 1):
            here = " (this thread)" if t.thread_id == self.thread else ""
            _out.print(f"{number:>2}. {t.title or 'untitled'} — {t.updated_at:%Y-%m-%d %H:%M}{here}\n    {t.thread_id}",
                       soft_wrap=True)
        if not found:
            _out.print("no threads yet", style="dim")

    def open(self, which: str) -> None:
        if which.isdigit() and 0 < int(which) <= len(self._listed):
            which = self._listed[int(which) - 1]
        if not which:
            _out.print("/open takes a number from /threads or a thread id", style="yellow")
            return
        self.thread = which
        _out.print(f"now on thread {which}", style="dim")

    async def command(self, line: str) -> bool:
        """Run a ``/command``; ``False`` when the chat should end."""
        name, _, rest = line.partition(" ")
        if name in _QUIT:
            return False
        if name == "/help":
            _out.print(_COMMANDS)
        elif name == "/new":
            self.thread = str(uuid.uuid4())
            _out.print(f"new thread {self.thread}", style="dim")
        elif name == "/threads":
            await self.threads()
        elif name == "/open":
            self.open(rest.strip())
        elif name == "/history":
            count = rest.strip()
            await self.history(min(int(count), 500) if count.isdigit() and int(count) > 0 else 20)
        else:
            _out.print(f"unknown command {name}; /help lists them", style="yellow")
        return True


async def run_chat(settings: Settings, owner: str, thread: str, timezone: str | None, *, demo_data: bool) -> None:
    """The terminal chat loop, as ``owner`` starting on ``thread`` (seeding the demo data first if asked).

    The timezone is ``timezone`` if given, else the owner's profile's, else TOLLGATE_DEFAULT_TIMEZONE
    when it is set, else the system's.
    """
    from tollgate.graph.app import open_app
    from tollgate.graph.profiles import get_profile
    from tollgate.graph.state import Context
    from tollgate.policies.errors import TollgateError

    async with open_app(settings) as app:
        profile = await get_profile(app.services.db, owner)
        timezone = timezone or profile.timezone or _local_timezone(settings)
        ctx = Context(owner_id=owner, timezone=timezone, channel="cli", locale=profile.locale)
        if demo_data:
            await _seed(app, owner, timezone)
        session = _Chat(app, ctx, thread)
        _out.print(f"Tollgate — chatting as [bold]{owner}[/] ({timezone}) on thread [bold]{thread}[/]. {_HELP}")
        await session.history(_SHOWN_ON_START, heading=f"earlier in this thread (`tollgate chat --thread {thread}`):")
        while True:
            try:
                line = (await _ask("you> ")).strip()
            except EOFError:
                _out.print()
                return
            if line.startswith("/"):
                if not await session.command(line):
                    return
                continue
            if not line:
                continue
            try:
                await _exchange(app, ctx, session.thread, line)
            except TollgateError as exc:
                _out.print(f"tollgate> refused ({exc.code}): {exc.message}", style="red")
            except EOFError:
                _out.print()
                return


def _local_timezone(settings: Settings) -> str:
    """TOLLGATE_DEFAULT_TIMEZONE when it is set, else the system's zone (tzlocal), else UTC."""
    if "default_timezone" in settings.model_fields_set:
        return settings.default_timezone
    import tzlocal

    try:
        return tzlocal.get_localzone_name() or settings.default_timezone
    except Exception:  # tzlocal raises its own errors for a misconfigured system: fall back, never fail
        return settings.default_timezone


@cli.command()
def chat(
    owner: Annotated[str, typer.Option(help="The owner to chat as.")] = _DEMO_OWNER,
    thread: Annotated[str | None, typer.Option(help="Thread id; default: the owner's CLI thread (a UUID).")] = None,
    timezone: Annotated[str | None, typer.Option(
        help="IANA timezone; default: the owner's profile's, else TOLLGATE_DEFAULT_TIMEZONE if set, else the system's.")] = None,
    demo_data: Annotated[bool | None, typer.Option(
        help="Seed the demo data set for an owner who has no data yet; default on, except in production.",
    )] = None,
) -> None:
    """Chat in the terminal; write actions ask for your approval inline."""
    from tollgate.graph.state import Context

    settings = _settings()
    try:
        Context(owner_id=owner, timezone=timezone or "UTC")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    seed = settings.environment != "production" if demo_data is None else demo_data
    _run(run_chat(settings, owner, thread or str(uuid.uuid5(_CLI_THREADS, owner)), timezone, demo_data=seed))


# --- serve ------------------------------------------------------------------------------------


async def _demo_token(settings: Settings) -> str:
    """Seed the demo owner and issue a fresh bearer token for it."""
    from tollgate.graph.services import utc_now
    from tollgate.graph.store.db import open_database
    from tollgate.graph.store.owner_scope import owner_transaction
    from tollgate.tools.demo import seed_demo
    from tollgate.web.auth import ensure_demo_token

    async with open_database(settings) as db:
        async with owner_transaction(db.pool, _DEMO_OWNER) as conn:
            await seed_demo(conn, _DEMO_OWNER, utc_now(), settings.default_timezone)
        return await ensure_demo_token(db, owner=_DEMO_OWNER)


def _check_port(host: str, port: int) -> None:
    """Exit 2 saying so when ``host:port`` cannot be bound, before anything is printed or started."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a closing socket is no conflict
        try:
            probe.bind((host, port))
        except OSError as exc:
            busy = exc.errno == errno.EADDRINUSE
            raise _fail(
                f"port {port} on {host} is {'already in use' if busy else f'not available ({exc.strerror})'}: "
                f"choose another with --port (make run PORT=8080)"
            ) from None


async def _serve(settings: Settings, host: str, port: int, *, worker: bool) -> None:
    """The server until Ctrl-C or SIGTERM, then a clean close (every connection) before returning."""
    serving = asyncio.create_task(_serve_app(settings, host, port, worker=worker))
    try:
        await asyncio.shield(serving)
    except asyncio.CancelledError:
        # uvicorn raises the Ctrl-C it handled again once it has shut down, which cancels this task:
        # let the app close its worker and database first (else its connections outlive the check below).
        await serving


async def _serve_app(settings: Settings, host: str, port: int, *, worker: bool) -> None:
    """The server (and an in-process worker) over one open app."""
    import uvicorn

    from tollgate.graph.app import open_app
    from tollgate.server import create_app

    async with AsyncExitStack() as stack:
        tollgate = await stack.enter_async_context(open_app(settings))
        if worker:
            from tollgate.graph.background.worker import start_in_process_worker

            handle = await start_in_process_worker(tollgate)
            stack.push_async_callback(handle.stop)
        if settings.metrics_port is not None:
            from tollgate.web.routes_metrics import serve_port

            metrics = asyncio.create_task(serve_port(tollgate.services.db.pool, settings.metrics_host,
                                                     settings.metrics_port,
                                                     refresh_seconds=settings.metrics_refresh_seconds), name="metrics")
            stack.callback(metrics.cancel)
        # log_config=None: uvicorn's lines go through the logging `_observed` set up (time, level, ids; JSON when asked).
        server = uvicorn.Server(uvicorn.Config(create_app(settings, tollgate=tollgate), host=host, port=port,
                                               log_config=None, log_level=settings.log_level.lower()))
        await server.serve()


def _stop_embedded(settings: Settings) -> None:
    """After ``serve``: stop the embedded PostgreSQL unless another process (Studio, a chat) still uses it."""
    if settings.database_url:
        return
    from tollgate.graph.store.embedded import stop_if_unused

    if stop_if_unused(settings.data_dir):
        _out.print("embedded PostgreSQL stopped", style="dim")


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
    _check_port(host, port)
    if settings.metrics_port is not None:
        _check_port(settings.metrics_host, settings.metrics_port)
    _observed(settings)
    try:
        if demo:
            _print_demo_link(_run(_demo_token(settings)), host, port)
        _run(_serve(settings, host, port, worker=worker))
    finally:
        _stop_embedded(settings)


def _print_demo_link(token: str, host: str, port: int) -> None:
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/"
    # One value per line, never wrapped, so each can be copied as it is. The token rides in the
    # fragment: a browser never sends it, so no access log records it.
    _out.print(Text.assemble("Tollgate: ", (f"{url}#token={token}", f"bold cyan link {url}#token={token}")), soft_wrap=True)
    _out.print(Text.assemble("demo token (owner `demo`): ", (token, "bold")), soft_wrap=True)
    _out.print(f"or: curl -N -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' "
               f"-d '{{\"message\": \"what is on my calendar today?\"}}' {url}v1/chat", style="dim", soft_wrap=True)
    _out.print("Ctrl-C stops the server (and the embedded database, unless Studio or a chat still uses it).", style="dim")


# --- worker, migrate --------------------------------------------------------------------------


@cli.command()
def worker(
    concurrency: Annotated[int | None, typer.Option(min=1, max=32, help="Runs at once; default TOLLGATE_WORKER_CONCURRENCY.")] = None,
    name: Annotated[str, typer.Option(help="Worker name, in its logs.")] = "tollgate-worker",
) -> None:
    """Run a background-run worker until SIGINT/SIGTERM (running runs finish first, bounded)."""
    from tollgate.graph.background.worker import run_worker

    settings = _settings()
    _observed(settings)
    _run(run_worker(settings, concurrency=concurrency, name=name))


async def run_migrate(settings: Settings) -> None:
    """Apply our migrations, the checkpointer's and the job queue's."""
    from tollgate.graph.background.queue import ensure_queue_schema
    from tollgate.graph.store.checkpointer import open_checkpointer
    from tollgate.graph.store.db import open_database

    async with open_database(settings) as db:
        await open_checkpointer(db)
        await ensure_queue_schema(db)


# --- tokens -----------------------------------------------------------------------------------

tokens = typer.Typer(help="Owners' bearer tokens for the HTTP API and the web page (only hashes are stored).",
                     no_args_is_help=True)
cli.add_typer(tokens, name="token")


async def _with_db(settings: Settings, use: Callable[[Any], Awaitable[_T]]) -> _T:
    from tollgate.graph.store.db import open_database

    async with open_database(settings) as db:
        return await use(db)


@tokens.command("create")
def token_create(
    owner: Annotated[str, typer.Option(help="The owner the token acts as.")],
    label: Annotated[str, typer.Option(help="A note to tell tokens apart (a device, a person).")] = "",
) -> None:
    """Issue a token for an owner and print it once (it is not stored, only its hash)."""
    from tollgate.web.auth import issue_token

    try:
        token = _run(_with_db(_settings(), lambda db: issue_token(db, owner, label=label)))
    except ValueError as exc:
        raise _fail(f"not created: {exc}") from None
    _out.print(token, soft_wrap=True)
    _err.print(f"a token for {owner}; it is shown this once. `tollgate token list` shows its id.", style="dim")


@tokens.command("list")
def token_list(
    owner: Annotated[str | None, typer.Option(help="Only this owner's tokens.")] = None,
    revoked: Annotated[bool, typer.Option("--revoked", help="Include revoked tokens.")] = False,
) -> None:
    """The live tokens: id, owner, label, when created (never the tokens themselves)."""
    from rich.table import Table

    from tollgate.web.auth import list_tokens

    found = _run(_with_db(_settings(), lambda db: list_tokens(db, owner_id=owner, revoked=revoked)))
    table = Table("id", "owner", "label", "created", *(["revoked"] if revoked else []), box=None, pad_edge=False)
    for info in found:
        created = f"{info.created_at:%Y-%m-%d %H:%M}"
        gone = [f"{info.revoked_at:%Y-%m-%d %H:%M}" if info.revoked_at else ""] if revoked else []
        table.add_row(info.id, info.owner_id, info.label, created, *gone)
    _out.print(table if found else "no tokens")


@tokens.command("revoke")
def token_revoke(token_id: Annotated[str, typer.Argument(metavar="ID", help="The id `token list` shows.")]) -> None:
    """Revoke a token: requests that carry it are refused from now on."""
    from tollgate.web.auth import TokenNotFound, revoke_token_id

    try:
        info = _run(_with_db(_settings(), lambda db: revoke_token_id(db, token_id)))
    except TokenNotFound as exc:
        raise _fail(f"nothing revoked: {exc}") from None
    _out.print(f"revoked {info.id} ({info.owner_id}{', ' + info.label if info.label else ''})")


# --- the embedded database ---------------------------------------------------------------------

database = typer.Typer(help="The embedded PostgreSQL under TOLLGATE_DATA_DIR (when DATABASE_URL is unset).",
                       no_args_is_help=True)
cli.add_typer(database, name="db")


def _embedded_dir() -> Path:
    settings = _settings()
    if settings.database_url:
        raise _fail("DATABASE_URL is set: Tollgate uses that server, not the embedded one; manage it with its own tools")
    return settings.data_dir


@database.command("status")
def db_status() -> None:
    """Where the embedded database lives, whether it is running and how big it is."""
    from tollgate.graph.store.embedded import status

    state = status(_embedded_dir())
    _out.print(f"data:    {state.pgdata}" + ("" if state.initialized else " (not created yet: the first start creates it)"))
    _out.print(f"size:    {state.size_bytes() / 1e6:.1f} MB")
    if state.running:
        _out.print(f"running: yes (pid {state.pid}, socket {state.socket_dir}, port {state.port})")
        _out.print(f"url:     {state.url}", soft_wrap=True)
    else:
        _out.print("running: no")


@database.command("stop")
def db_stop() -> None:
    """Stop the embedded database (fast shutdown: connected processes lose their connections; data is kept)."""
    from tollgate.graph.store.embedded import stop

    try:
        stopped = stop(_embedded_dir())
    except TimeoutError as exc:
        raise _fail(str(exc)) from None
    _out.print("stopped" if stopped else "it was not running")


@database.command("reset")
def db_reset(
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete the embedded database: every owner's data, thread, approval and token. The next start makes a new one."""
    from tollgate.graph.store.embedded import reset

    data_dir = _embedded_dir()
    if not yes and not typer.confirm(f"Delete everything under {data_dir.resolve() / 'pg'}?", default=False):
        raise typer.Exit(1)
    _out.print("deleted" if reset(data_dir) else "there was no embedded database")


# --- credentials -------------------------------------------------------------------------------

credentials = typer.Typer(help="Owners' secrets for tools (API tokens, passwords), stored encrypted.", no_args_is_help=True)
cli.add_typer(credentials, name="credentials")


async def _credential_store(settings: Settings, use: Callable[[Any], Awaitable[_T]]) -> _T:
    from tollgate.graph.perimeter.credentials import CredentialStore, credentials_cipher

    cipher = credentials_cipher(settings, settings.approval_key())
    return await _with_db(settings, lambda db: use(CredentialStore(db.pool, cipher)))


@credentials.command("set")
def credentials_set(
    name: Annotated[str, typer.Argument(help="The secret's name, as the tool reads it (api_token...).")],
    owner: Annotated[str, typer.Option(help="The owner it belongs to.")],
    tool: Annotated[str, typer.Option(help="The tool that may read it.")],
) -> None:
    """Store a secret, read from standard input (never from the command line, where `ps` would show it)."""
    from tollgate.policies.errors import TollgateError

    value = sys.stdin.readline().rstrip("\n") if not sys.stdin.isatty() else typer.prompt("value", hide_input=True)
    try:
        _run(_credential_store(_settings(), lambda store: store.set(owner, tool, name, value)))
    except (ValueError, TollgateError) as exc:
        _err.print(f"not stored: {getattr(exc, 'message', exc)}", style="red")
        raise typer.Exit(2) from None
    _out.print(f"stored {tool}/{name} for {owner}")


@credentials.command("list")
def credentials_list(owner: Annotated[str, typer.Option(help="The owner.")]) -> None:
    """The names of the owner's stored secrets (never their values)."""
    found: list[tuple[str, str]] = _run(_credential_store(_settings(), lambda store: store.names(owner)))
    for tool, name in found:
        _out.print(f"{tool}/{name}")


@credentials.command("delete")
def credentials_delete(
    name: Annotated[str, typer.Argument(help="The secret's name.")],
    owner: Annotated[str, typer.Option(help="The owner it belongs to.")],
    tool: Annotated[str, typer.Option(help="The tool it belongs to.")],
) -> None:
    """Forget a secret."""
    gone: bool = _run(_credential_store(_settings(), lambda store: store.delete(owner, tool, name)))
    _out.print(f"deleted {tool}/{name}" if gone else f"{owner} has no {tool}/{name}")



mcp = typer.Typer(help="MCP servers as governed tools (TOLLGATE_MCP_POLICY).", no_args_is_help=True)
cli.add_typer(mcp, name="mcp")


@mcp.command("check")
def mcp_check(
    policy: Annotated[Path, typer.Argument(metavar="POLICY", help="The policy file (TOML).")],
) -> None:
    """Connect to every server of POLICY and report what it would do: tools it names that a server
    does not offer, tools it leaves out, unknown keys, missing effects and usage examples, stale
    schema pins. Exits 1 when the server would refuse to start with it."""
    from tollgate.tools.mcp_check import check_policy

    findings = _run(check_policy(policy))
    for finding in findings:
        style = "red" if finding.level == "error" else "yellow"
        _out.print(f"{finding.level}: {finding.where}: {finding.message}", style=style, soft_wrap=True)
    errors = sum(f.level == "error" for f in findings)
    if errors:
        raise _fail(f"{errors} error(s): a server would not start with this policy", code=1)
    _out.print(f"ok: {policy} is ready" + (f" ({len(findings)} warning(s))" if findings else ""))


accounts = typer.Typer(help="Owners' own accounts (a CalDAV calendar, an IMAP mailbox with its SMTP server), "
                            "checked with their servers, stored encrypted.", no_args_is_help=True)
cli.add_typer(accounts, name="account")


@accounts.command("add")
def account_add(
    owner: Annotated[str, typer.Option(help="The owner it belongs to.")],
    url: Annotated[str, typer.Option(help="caldav: the calendar's address (https://dav.example.com/alice/calendar/); "
                                          "imap: the IMAP server (imaps://imap.example.com).")],
    username: Annotated[str, typer.Option(help="The login on that server (and, for imap, on the SMTP server).")],
    kind: Annotated[str, typer.Option(help="caldav or imap.")] = "caldav",
    smtp_url: Annotated[str, typer.Option(help="imap: the SMTP server (smtps://smtp.example.com:465 or "
                                               "smtp+starttls://smtp.example.com:587).")] = "",
    address: Annotated[str, typer.Option(help="imap: the owner's address, the From of what they send.")] = "",
) -> None:
    """Connect an account: the password is read from standard input (never the command line), the
    login is tried against the server(s), and nothing is stored unless it works."""
    from tollgate.tools.perimeter.config import egress_client
    from tollgate.policies.errors import TollgateError
    from tollgate.graph.perimeter.accounts import connect_caldav, connect_imap

    if kind not in ("caldav", "imap"):
        raise _fail("--kind is caldav or imap")
    password = sys.stdin.readline().rstrip("\n") if not sys.stdin.isatty() else typer.prompt("password", hide_input=True)
    settings = _settings()
    plaintext = frozenset(settings.connector_plaintext_hosts)
    on_lan = kind in settings.connector_private_networks.get(owner, [])

    def connect(store: Any) -> Any:
        if kind == "imap":
            return connect_imap(store, egress_client(settings), owner, imap_url=url, smtp_url=smtp_url,
                                username=username, password=password, address=address, plaintext_hosts=plaintext,
                                private_network=on_lan)
        return connect_caldav(store, egress_client(settings), owner, url=url, username=username, password=password,
                              plaintext_hosts=plaintext, private_network=on_lan)

    try:
        done = _run(_credential_store(settings, connect))
    except (ValueError, TollgateError) as exc:
        _err.print(f"not connected: {getattr(exc, 'message', exc)}", style="red")
        raise typer.Exit(2) from None
    what = "calendar" if kind == "caldav" else "mailbox"
    _out.print(f"connected {owner}'s {what} at {done.url} as {done.username}")


@accounts.command("remove")
def account_remove(
    owner: Annotated[str, typer.Option(help="The owner.")],
    kind: Annotated[str, typer.Option(help="caldav or imap.")] = "caldav",
) -> None:
    """Forget an owner's account (its stored login)."""
    from tollgate.graph.perimeter.accounts import disconnect

    if kind not in ("caldav", "imap"):
        raise _fail("--kind is caldav or imap")
    gone: bool = _run(_credential_store(_settings(), lambda store: disconnect(store, owner, kind)))
    _out.print(f"removed {owner}'s {kind} account" if gone else f"{owner} has no {kind} account")


@cli.command()
def migrate() -> None:
    """Apply the database migrations (ours, the checkpointer's, the job queue's) and exit."""
    _run(run_migrate(_settings()))
    _out.print("migrations applied")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``tollgate`` command."""
    cli(args=argv, prog_name="tollgate")


if __name__ == "__main__":
    main()
