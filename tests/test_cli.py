"""The ``tollgate`` command, run as a person runs it: the installed entry point in a subprocess.

``tollgate chat`` runs on a real pseudo-terminal (stdlib ``pty``): the test types lines and
reads the screen, as in tmux. ``serve``, ``worker`` and ``migrate`` run as plain processes.
Every process uses the session database and a scrubbed environment (no model endpoint, no
``.env``: it runs in a temporary directory).
"""

from __future__ import annotations

import asyncio
import os
import pty
import re
import secrets
import select
import signal
import subprocess
import sys
import termios
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tollgate.graph._env import child_environment
from tollgate.graph.background.queue import ensure_queue_schema
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database
from tests.children import free_port
from tests.conftest import all_rows

_TOLLGATE = str(Path(sys.executable).with_name("tollgate"))
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[=>]|\r")
def _env(settings: Settings, **extra: str) -> dict[str, str]:
    # PYTHONFAULTHANDLER: a process that hangs dumps every thread's stack on SIGABRT (see _Terminal.wait).
    return child_environment(settings, TERM="xterm-256color", PYTHONFAULTHANDLER="1", **extra)


class _Terminal:
    """A process on a pseudo-terminal: type lines into it and read its screen (ANSI stripped)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        master, slave = pty.openpty()
        termios.tcsetwinsize(slave, (50, 120))
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd,
                                     start_new_session=True)
        os.close(slave)
        self._fd = master
        self.screen = ""
        self._pos = 0

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self._fd, 65536)
        except OSError:  # EIO: the process closed the terminal
            return False
        self.screen += _ANSI.sub("", chunk.decode("utf-8", "replace"))
        return bool(chunk)

    def expect(self, text: str, timeout: float = 90) -> str:
        """Wait until ``text`` appears after what was already matched; return the output up to it."""
        deadline = time.monotonic() + timeout
        while (at := self.screen.find(text, self._pos)) < 0:
            if time.monotonic() > deadline or not self._read(0.2):
                pytest.fail(f"{text!r} never appeared; the screen ends with:\n{self.screen[-3000:]}")
        seen, self._pos = self.screen[self._pos : at + len(text)], at + len(text)
        return seen

    def type(self, line: str) -> None:
        """Type ``line`` and press Enter."""
        os.write(self._fd, line.encode() + b"\r")

    def press_ctrl_d(self) -> None:
        os.write(self._fd, b"\x04")

    def press_ctrl_c(self) -> None:
        """What the terminal does on Ctrl-C: SIGINT to the process (its own session, so sent to its group)."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def wait(self, timeout: float = 60) -> int:
        """Drain the screen until the process exits; its exit code."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.2)
        if self.proc.poll() is None:
            # Where it hangs: the fault handler prints every thread's stack on SIGABRT, then the process dies.
            os.kill(self.proc.pid, signal.SIGABRT)
            stop = time.monotonic() + 5
            while self.proc.poll() is None and time.monotonic() < stop and self._read(0.2):
                pass
            pytest.fail(f"still running after {timeout} s; the screen ends with:\n{self.screen[-6000:]}")
        return self.proc.wait(timeout=1)

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        os.close(self._fd)


@pytest.fixture
def chat(settings: Settings, owner: str, tmp_path: Path) -> Iterator[_Terminal]:
    """``tollgate chat`` as a fresh owner on a fresh thread, on a terminal, at its first prompt."""
    term = _Terminal([_TOLLGATE, "chat", "--owner", owner, "--thread", str(uuid.uuid4())], _env(settings), tmp_path)
    try:
        term.expect(f"chatting as {owner}")
        term.expect("you> ")
        yield term
    finally:
        term.close()


async def _calendar(db: Database, owner: str) -> dict[str, str]:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT title, status FROM calendar_events WHERE owner_id = %s", (owner,))
        return {row["title"]: row["status"] for row in await cur.fetchall()}


async def _approvals(db: Database, owner: str) -> list[str]:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT status FROM approvals WHERE owner_id = %s ORDER BY created_at", (owner,))
        return [row["status"] for row in await cur.fetchall()]


async def test_chat_lists_the_calendar_and_cancels_the_2nd_event_after_an_inline_approve(
    chat: _Terminal, db: Database, owner: str
) -> None:
    chat.type("what's on my calendar today?")
    listed = chat.expect("you> ")
    assert "running calendar.list" in listed
    assert "2. Lunch with Sam" in listed

    chat.type("cancel the 2nd one")
    asked = chat.expect("approve? [a]pprove / [e]dit / [r]eject")
    assert "needs your approval" in asked and "Cancel “Lunch with Sam”" in asked
    assert "You asked: “cancel the 2nd one”" in asked  # the card, as every surface shows it
    assert (await _calendar(db, owner))["Lunch with Sam"] == "confirmed"  # nothing runs before the approve

    chat.type("a")
    done = chat.expect("you> ")
    assert "running calendar.cancel_event" in done
    assert "tollgate> Cancelled “Lunch with Sam”" in done
    calendar = await _calendar(db, owner)
    assert calendar["Lunch with Sam"] == "cancelled"
    assert calendar["Standup"] == calendar["Design review"] == "confirmed"
    assert await _approvals(db, owner) == ["executed"]

    chat.type("/quit")
    assert chat.wait() == 0


async def test_chat_edit_checks_the_new_json_args_and_reject_changes_nothing(
    chat: _Terminal, db: Database, owner: str
) -> None:
    chat.type("what's on my calendar today?")
    chat.expect("you> ")

    chat.type("cancel the 2nd one")
    chat.expect("approve?")
    chat.type("e")
    chat.expect("new arguments as JSON")
    chat.type("{oops")
    chat.expect("that is not JSON; try again")
    chat.type('{"event_id": "evt_not_on_the_list"}')  # the server re-checks edited ids: off the list, nothing runs
    refused = chat.expect("still pending")
    assert "running calendar.cancel_event" not in refused and "not accepted (off_list_id)" in refused
    assert (await _calendar(db, owner))["Lunch with Sam"] == "confirmed"

    chat.expect("approve?")  # the same request, asked again
    chat.type("e")
    chat.expect("new arguments as JSON")
    chat.type('{"event_id": "#3"}')
    shown = chat.expect("approve?")  # the edited call comes back as a new preview to approve
    assert "Cancel “Design review”" in shown
    assert (await _calendar(db, owner))["Design review"] == "confirmed"
    chat.type("a")
    edited = chat.expect("you> ")
    assert "Cancelled “Design review”" in edited
    calendar = await _calendar(db, owner)
    assert calendar["Design review"] == "cancelled" and calendar["Lunch with Sam"] == "confirmed"

    chat.type("cancel the 1st one")
    chat.expect("approve?")
    chat.type("r")
    chat.expect("reason (optional): ")
    chat.type("not today")
    rejected = chat.expect("you> ")
    assert "nothing was changed" in rejected
    assert (await _calendar(db, owner))["Standup"] == "confirmed"
    assert (await _approvals(db, owner))[-1] == "rejected"

    chat.press_ctrl_d()
    assert chat.wait() == 0


def test_ctrl_c_at_the_prompt_exits_at_once(chat: _Terminal) -> None:
    chat.press_ctrl_c()  # no Enter follows: the chat must not wait for one
    assert chat.wait(timeout=20) == 130


async def test_chat_commands_and_the_thread_kept_across_restarts(settings: Settings, owner: str, tmp_path: Path) -> None:
    thread = str(uuid.uuid4())
    first = _Terminal([_TOLLGATE, "chat", "--owner", owner, "--thread", thread], _env(settings), tmp_path)
    try:
        first.expect("you> ")
        first.type("/help")
        assert "/history [N]" in first.expect("you> ")
        first.type("what's on my calendar today?")
        first.expect("you> ")
        first.type("/history")
        shown = first.expect("you> ")
        assert "  you: what's on my calendar today?" in shown and "Lunch with Sam" in shown
        first.type("/new")
        assert "new thread" in first.expect("you> ")
        first.type("/history")
        assert "nothing in this thread yet" in first.expect("you> ")
        first.type("/threads")
        listed = first.expect("you> ")
        assert " 1. what's on my calendar today?" in listed and thread in listed
        first.type("/open 1")
        assert f"now on thread {thread}" in first.expect("you> ")
        first.type("/bogus")
        assert "unknown command /bogus" in first.expect("you> ")
        first.type("/quit")
        assert first.wait() == 0
    finally:
        first.close()

    again = _Terminal([_TOLLGATE, "chat", "--owner", owner, "--thread", thread], _env(settings), tmp_path)
    try:
        opened = again.expect("you> ")
        assert "earlier in this thread" in opened
        assert "what's on my calendar today?" in opened and "Lunch with Sam" in opened
        again.press_ctrl_d()
        assert again.wait() == 0
    finally:
        again.close()


def test_chat_takes_the_system_timezone_when_none_is_configured(settings: Settings, owner: str, tmp_path: Path) -> None:
    env = _env(settings, TZ="Asia/Tokyo")
    del env["TOLLGATE_DEFAULT_TIMEZONE"]
    term = _Terminal([_TOLLGATE, "chat", "--owner", owner, "--thread", str(uuid.uuid4())], env, tmp_path)
    try:
        assert f"chatting as {owner} (Asia/Tokyo)" in term.expect("you> ")
        term.press_ctrl_d()
        assert term.wait() == 0
    finally:
        term.close()


def test_migrate_applies_every_migration(settings: Settings, tmp_path: Path) -> None:
    done = subprocess.run([_TOLLGATE, "migrate"], env=_env(settings), cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "migrations applied" in done.stdout


def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    import importlib.metadata

    done = subprocess.run([_TOLLGATE, "--version"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"tollgate {importlib.metadata.version('tollgate')}"


def test_a_misspelt_setting_is_named_at_start_with_the_closest_real_one(settings: Settings, tmp_path: Path) -> None:
    """A typo once left the setting at its default without a word."""
    done = subprocess.run([_TOLLGATE, "migrate"], env=_env(settings, TOLLGATE_THREAD_LEASE_SECOND="3",
                                                            TOLLGATE_FROBNICATE="1"),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    said = " ".join(done.stderr.split())
    assert ("TOLLGATE_THREAD_LEASE_SECOND is not a Tollgate setting and is ignored; did you mean "
            "TOLLGATE_THREAD_LEASE_SECONDS?") in said
    assert "TOLLGATE_FROBNICATE is not a Tollgate setting and is ignored" in said
    assert "TOLLGATE_DATA_DIR" not in said and "DATABASE_URL" not in said  # real settings are not named


def test_serve_demo_is_refused_in_production(settings: Settings, tmp_path: Path) -> None:
    done = subprocess.run([_TOLLGATE, "serve", "--demo"], env=_env(settings, TOLLGATE_ENVIRONMENT="production"),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "refused in production" in done.stderr


def test_a_bad_configuration_exits_2_and_never_echoes_the_secret(settings: Settings, tmp_path: Path) -> None:
    leaked = "short-secret"  # too short for production: refused, and must not be printed
    done = subprocess.run([_TOLLGATE, "migrate"],
                          env=_env(settings, TOLLGATE_ENVIRONMENT="production", TOLLGATE_APPROVAL_SECRET=leaked),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "TOLLGATE_APPROVAL_SECRET" in done.stderr
    assert leaked not in done.stdout + done.stderr


async def _worker_ids(db: Database) -> set[int]:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT id FROM procrastinate_workers")
        return {int(row["id"]) for row in await cur.fetchall()}


async def _wait_for(check: Callable[[], Awaitable[bool]], deadline: float) -> None:
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.2)
    pytest.fail(f"{check.__name__} never became true")


async def test_serve_demo_prints_the_url_and_a_working_token_and_runs_one_worker(
    settings: Settings, db: Database, tmp_path: Path
) -> None:
    await ensure_queue_schema(db)
    before = await _worker_ids(db)
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([_TOLLGATE, "serve", "--demo", "--port", str(port)], env=_env(settings),
                                cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120

        async def up() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                return httpx.get(url + "healthz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        await _wait_for(up, deadline)
        printed = log.read_text()
        assert f"Tollgate: {url}" in printed
        match = re.search(r"demo token \(owner `demo`\): (tg_[A-Za-z0-9_-]+)", printed)
        assert match is not None, printed[-3000:]
        token = match.group(1)
        assert httpx.get(url + "v1/threads", headers={"Authorization": f"Bearer {token}"}, timeout=10).status_code == 200
        assert httpx.get(url + "v1/threads", timeout=10).status_code == 401

        async def worker_registered() -> bool:
            return bool(await _worker_ids(db) - before)

        await _wait_for(worker_registered, deadline)
        mine = await _worker_ids(db) - before
        assert len(mine) == 1
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()[-3000:]
    assert not (await _worker_ids(db)) & mine  # the in-process worker deregistered on the way out


async def test_worker_runs_until_sigterm_and_stops_cleanly(settings: Settings, db: Database, tmp_path: Path) -> None:
    await ensure_queue_schema(db)
    before = await _worker_ids(db)
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        proc = subprocess.Popen([_TOLLGATE, "worker", "--name", "cli-test-" + secrets.token_hex(3)],
                                env=_env(settings), cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        async def registered() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            return bool(await _worker_ids(db) - before)

        await _wait_for(registered, time.monotonic() + 120)
        mine = await _worker_ids(db) - before
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()[-3000:]
    assert not (await _worker_ids(db)) & mine
