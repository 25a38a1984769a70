"""LangChain's own chat UI for LangGraph servers (agent-chat-ui), unmodified, against ``make studio``.

The copy in ``../shared/clients/agent-chat-ui`` is copied to a scratch folder under ``var/`` (kept
between runs, keyed by its ``package.json``), installed with ``npm install`` from the npm
registry and served by ``next dev`` on loopback. Debian's Chromium, through Playwright, signs in
with a Tollgate token (the UI's "API key", which its SDK sends as ``X-Api-Key``) against a real
``langgraph dev`` with our authentication, and uses the UI as a person would: a read turn shows
its reply; a write shows Tollgate's approval card; Approve runs it exactly once; an edit changes
the value (Tollgate shows the edited call as a new card, which is approved); Reject runs nothing.
Every effect is checked in our own tables.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, expect

from tollgate.graph._env import stop_group
from tollgate.graph.services import utc_now
from tollgate.graph.store.db import Database
from tests.children import free_port, wait_answering
from tests.conftest import all_rows
from tests.studio_harness import studio_url  # noqa: F401 - a fixture
from tests.test_web_browser import _page, chromium  # noqa: F401 - a fixture
from tollgate.tools.demo import seed_demo
from tollgate.web.auth import issue_token

_ROOT = Path(__file__).resolve().parent.parent
def _client() -> Path:
    """The unmodified client: ``shared/clients/agent-chat-ui`` beside the repository (or beside one of
    its parents, for a clone made elsewhere); ``TOLLGATE_AGENT_CHAT_UI`` names another copy."""
    named = os.environ.get("TOLLGATE_AGENT_CHAT_UI")
    candidates = [Path(named)] if named else [p / "shared" / "clients" / "agent-chat-ui" for p in _ROOT.parents]
    for candidate in candidates:
        if (candidate / "package.json").exists():
            return candidate
    pytest.fail(f"agent-chat-ui not found (looked in {', '.join(map(str, candidates[:3]))}): set TOLLGATE_AGENT_CHAT_UI")
_ARTIFACTS = _ROOT / "artifacts"
_WAIT_MS = 60_000


def _installed() -> Path:
    """The client, copied to ``var/agent-chat-ui/<hash>`` and installed (once per ``package.json``)."""
    client = _client()
    digest = hashlib.sha256((client / "package.json").read_bytes()).hexdigest()[:12]
    home = _ROOT / "var" / "agent-chat-ui" / digest
    done = home / ".installed"
    if done.exists():
        return home
    if home.exists():
        shutil.rmtree(home)  # a copy whose install did not finish
    shutil.copytree(client, home, ignore=shutil.ignore_patterns("node_modules", ".next"))
    env = {**os.environ, "NEXT_TELEMETRY_DISABLED": "1", "npm_config_update_notifier": "false"}
    installed = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=home, env=env,
                               capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stderr[-3000:]
    done.write_text(digest)
    return home


@pytest.fixture(scope="module")
def chat_ui_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``next dev`` serving the unmodified agent-chat-ui on a free loopback port."""
    if shutil.which("npm") is None:
        pytest.fail("npm is missing: `make system-packages` (part of `make test`) installs Node.js and npm")
    home = _installed()
    port = free_port()
    log = tmp_path_factory.mktemp("agent-chat-ui") / "next-dev.log"
    env = {**os.environ, "NEXT_TELEMETRY_DISABLED": "1", "PORT": str(port)}
    with log.open("wb") as out:
        proc = subprocess.Popen(["npx", "next", "dev", "-p", str(port), "-H", "127.0.0.1"], cwd=home, env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_answering(url, proc, log, what="next dev (agent-chat-ui)", timeout=300)
        yield url
    finally:
        stop_group(proc)


@pytest.fixture
async def chat_owner(db: Database, owner: str) -> str:
    """A fresh owner with the demo data placed around the real clock (``langgraph dev`` has no other)."""
    async with all_rows(db) as conn:
        await seed_demo(conn, owner, utc_now(), "UTC")
    return owner


@pytest.fixture
async def page(chromium: Path, tmp_path: Path) -> AsyncIterator[Page]:  # noqa: F811 - the fixture above
    """A fresh headless Chromium page (the UI's own console warnings are its business, not checked)."""
    async with _page(chromium, tmp_path, []) as opened:
        opened.set_default_timeout(_WAIT_MS)
        yield opened


async def _count(db: Database, sql: str, owner: str) -> int:
    async with all_rows(db) as conn:
        cur = await conn.execute(sql, (owner,))
        row = await cur.fetchone()
    return int(row["n"]) if row else -1


async def _tasks(db: Database, owner: str) -> list[str]:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT title FROM tasks WHERE owner_id = %s ORDER BY title", (owner,))
        return [r["title"] for r in await cur.fetchall()]


async def _lunch(db: Database, owner: str) -> str:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT status FROM calendar_events WHERE owner_id = %s AND title = 'Lunch with Sam'",
                                 (owner,))
        row = await cur.fetchone()
    return str(row["status"]) if row else ""


async def _until(read: Callable[[], Awaitable[Any]], expected: Any) -> None:
    """Wait until ``read()`` gives ``expected`` (what the UI shows can come before the effect commits)."""
    async with asyncio.timeout(_WAIT_MS / 1000):
        while (got := await read()) != expected:
            await asyncio.sleep(0.2)
    assert got == expected


async def _send(page: Page, text: str) -> None:
    """Type ``text`` and send it once the UI takes a message (its Send button is disabled while a run streams)."""
    box = page.get_by_placeholder("Type your message...")
    await box.fill(text)
    send = page.get_by_role("button", name="Send", exact=True)
    await expect(send).to_be_enabled()
    await send.click()
    await expect(box).to_have_value("")  # taken: the UI clears its box when it sends


async def _shot(page: Page, name: str) -> None:
    _ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(_ARTIFACTS / f"agent-chat-ui-{name}.png"), full_page=True)


async def test_agent_chat_ui_signs_in_with_a_token_reads_and_decides_tollgates_approvals(
    chat_ui_url: str, studio_url: str, page: Page, db: Database, chat_owner: str  # noqa: F811 - fixtures
) -> None:
    token = await issue_token(db, chat_owner, label="agent-chat-ui")
    tasks_before = await _tasks(db, chat_owner)
    try:
        # Sign in: the UI's own form, the token as its API key (sent as X-Api-Key).
        await page.goto(chat_ui_url)
        await page.fill("#apiUrl", studio_url)
        await page.fill("#assistantId", "tollgate")
        await page.fill("#apiKey", token)
        await page.get_by_role("button", name="Continue").click()

        # A read turn: its reply appears.
        await _send(page, "what's on my calendar today?")
        await expect(page.get_by_text("Lunch with Sam").first).to_be_visible()

        # A write: Tollgate's card, as the UI renders a LangChain HITL interrupt; Approve runs it once.
        await _send(page, "cancel the 2nd one")
        await expect(page.get_by_text("calendar__cancel_event").first).to_be_visible()
        assert await _lunch(db, chat_owner) == "confirmed"  # nothing ran before the decision
        await page.get_by_role("button", name="Approve", exact=True).click()
        await expect(page.get_by_text("Cancelled").first).to_be_visible()
        assert await _lunch(db, chat_owner) == "cancelled"
        assert await _count(db, "SELECT count(*) AS n FROM effects WHERE owner_id = %s", chat_owner) == 1

        # An edit changes the value: Tollgate shows the edited call as a new card, approved in turn.
        await _send(page, "add a task: renew the passport")
        await expect(page.get_by_text("tasks__create").first).to_be_visible()
        field = page.locator("textarea").filter(has_text="Renew the passport").first
        await field.fill("Renew the passport before June")
        await page.get_by_role("button", name="Submit", exact=True).click()
        # The new card (its button reads Approve again, not Submit) carries the edited title; nothing ran yet.
        await expect(page.get_by_role("button", name="Approve", exact=True)).to_be_visible()
        await expect(page.locator("textarea").filter(has_text="Renew the passport before June")).to_have_count(1)
        assert await _tasks(db, chat_owner) == tasks_before
        await page.get_by_role("button", name="Approve", exact=True).click()
        await _until(lambda: _tasks(db, chat_owner), sorted([*tasks_before, "Renew the passport before June"]))

        # Reject runs nothing, and the reply says so.
        await _send(page, "add a task: water the ferns")
        await expect(page.get_by_text("tasks__create").first).to_be_visible()
        await page.get_by_placeholder("Share feedback with the agent...").fill("not now")
        await page.get_by_role("button", name="Submit rejection").click()
        await expect(page.get_by_text("I won't do that").first).to_be_visible()
        assert await _tasks(db, chat_owner) == sorted([*tasks_before, "Renew the passport before June"])
        assert await _count(db, "SELECT count(*) AS n FROM effects WHERE owner_id = %s", chat_owner) == 2
    except BaseException:
        await _shot(page, "failure")
        raise
