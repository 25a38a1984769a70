"""The web page in a real headless Chromium: chat, see the approval chip, approve, see the result.

Debian's ``chromium`` driven through Playwright with the system executable (no browser is
ever downloaded). ``make test`` installs it when missing (``.ci/system-packages``); run directly
without it, the test fails and says how to get it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import ConsoleMessage, Page, async_playwright, expect

from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database
from tests.conftest import all_rows
from tests.fakes import ScriptedModel, call, calls, say
from tests.harness import Clock
from tests.server_harness import Api, LiveServer, serve
from tollgate.web.auth import issue_token

CHROMIUM = Path("/usr/bin/chromium")
_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
_ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
_WAIT_MS = 30_000


@pytest.fixture
def chromium() -> Path:
    """The system Chromium, or a failure saying how to get it (``make test`` installs it first)."""
    if CHROMIUM.exists():
        return CHROMIUM
    pytest.fail(f"{CHROMIUM} is missing: `make system-packages` (part of `make test`) installs Debian's chromium")


async def _lunch(db: Database, owner: str) -> str:
    async with all_rows(db) as conn:
        cur = await conn.execute(
            "SELECT status FROM calendar_events WHERE owner_id = %s AND title = 'Lunch with Sam'", (owner,)
        )
        row = await cur.fetchone()
    assert row is not None
    return str(row["status"])


@asynccontextmanager
async def _page(chromium: Path, tmp_path: Path, problems: list[str]) -> AsyncIterator[Page]:
    """A page of a fresh headless Chromium profile; script errors and CSP violations go to ``problems``."""
    async with async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=str(chromium), headless=True, args=_ARGS,
            viewport={"width": 1280, "height": 800},
        )
        try:
            page = context.pages[0] if context.pages else await context.new_page()
            page.on("console", lambda m: problems.append(m.text) if _is_error(m) else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            yield page
        finally:
            await context.close()


async def _send(page: Page, text: str) -> None:
    await page.fill("#message", text)
    await page.click("#send")


async def test_chat_then_approve_from_the_approval_chip(
    api: Api, live_server: LiveServer, db: Database, chromium: Path, tmp_path: Path
) -> None:
    problems: list[str] = []
    async with _page(chromium, tmp_path, problems) as page:
        await page.goto(f"{live_server.url}/#token={api.token}")
        assert "token=" not in page.url  # the demo link's token leaves the address bar at once
        await expect(page.locator("#status")).to_have_text("Ready", timeout=_WAIT_MS)

        await _send(page, "what's on my calendar today?")
        listing = page.locator(".msg.assistant .bubble.done").last
        await expect(listing).to_contain_text("Lunch with Sam", timeout=_WAIT_MS)

        await _send(page, "cancel the 2nd one")
        chip = page.locator(".chip").last
        await expect(chip.locator(".chip-preview")).to_contain_text("Cancel “Lunch with Sam”", timeout=_WAIT_MS)
        await expect(page.locator("#timeline .ev-approval_required")).to_have_count(1)
        await expect(page.locator("#approvals li")).to_contain_text(["Cancel “Lunch with Sam”"])
        assert await _lunch(db, api.owner) == "confirmed"  # nothing runs before the click
        _ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(_ARTIFACTS / "web-chip.png"), full_page=True)

        await chip.locator("button.approve").click()
        result = page.locator(".msg.assistant .bubble.done").last
        await expect(result).to_contain_text("Cancelled “Lunch with Sam”", timeout=_WAIT_MS)
        await expect(chip.locator(".chip-state")).to_have_text("Decided: approve")
        await expect(chip.locator("button.approve")).to_be_disabled()
        await expect(page.locator("#approvals li")).to_have_text(["None"])
        await expect(page.locator("#timeline .ev-message_complete")).to_have_count(2)

        await page.screenshot(path=str(_ARTIFACTS / "web-approve.png"), full_page=True)
    assert await _lunch(db, api.owner) == "cancelled"
    assert problems == []  # no script errors, no CSP violations


def _is_error(message: ConsoleMessage) -> bool:
    return message.type == "error"



async def test_a_request_of_two_actions_is_decided_per_action_then_sent_once(
    settings: Settings, db: Database, owner: str, demo_token: str, chromium: Path, tmp_path: Path
) -> None:
    """A model answer with two writes: two chips, a decision on each, one resume with both."""
    from tests.conftest import NOW, all_rows

    token = demo_token
    model = ScriptedModel(steps=[
        call("calendar__list", {"range": "today"}), say(""),
        calls(("calendar__cancel_event", {"event_id": "#2"}),
              ("mail__send", {"to": ["sam@example.com"], "subject": "Lunch", "body": "Sorry, I can't make it."})),
        say("I cancelled the lunch and did not write to Sam."),
    ])
    problems: list[str] = []
    roomy = settings.model_copy(update={"rate_limit_burst": 100_000, "rate_limit_per_minute": 1_000_000})
    with serve(roomy, clock=Clock(NOW), picker_model=model) as server:
        async with _page(chromium, tmp_path, problems) as page:
            await page.goto(f"{server.url}/#token={token}")
            await expect(page.locator("#status")).to_have_text("Ready", timeout=_WAIT_MS)
            await _send(page, "what's on my calendar today?")
            await expect(page.locator(".msg.assistant .bubble.done").last).to_contain_text(
                "Lunch with Sam", timeout=_WAIT_MS)

            await _send(page, "cancel the lunch and tell Sam")
            request = page.locator(".request").last
            await expect(request.locator(".request-head")).to_contain_text("2 actions", timeout=_WAIT_MS)
            chips = request.locator(".chip")
            await expect(chips).to_have_count(2)
            await expect(chips.nth(0).locator(".chip-preview")).to_contain_text("Cancel “Lunch with Sam”")
            await expect(chips.nth(1).locator(".chip-preview")).to_contain_text("sam@example.com")
            send = request.locator("button.send-decisions")
            await chips.nth(0).locator("button.approve").click()
            await expect(send).to_be_disabled()  # one decision is not a full set
            await chips.nth(1).locator("button.reject").click()
            await chips.nth(1).locator("button.reject").click()  # confirm
            await expect(chips.nth(1).locator(".chip-state")).to_have_text("Will reject")
            assert await _lunch(db, owner) == "confirmed"  # nothing runs before the decisions are sent
            _ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(_ARTIFACTS / "web-request.png"), full_page=True)
            await send.click()
            await expect(page.locator(".msg.assistant .bubble.done").last).to_contain_text(
                "I cancelled the lunch", timeout=_WAIT_MS)
            await expect(request.locator(".request-state")).to_have_text("Decided: approve, reject")
    assert await _lunch(db, owner) == "cancelled"
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM mail_outbox WHERE owner_id = %s", (owner,))
        assert (await cur.fetchone())["n"] == 0  # type: ignore[index]
    assert problems == []


async def test_the_demo_link_keeps_the_token_out_of_every_request_and_the_access_log(
    settings: Settings, db: Database, owner: str, chromium: Path, tmp_path: Path
) -> None:
    """The token rides in the URL fragment, which the browser never sends; the page then sends it
    only as an ``Authorization`` header, which uvicorn's access log does not record."""
    token = await issue_token(db, owner, label="test")
    problems: list[str] = []
    sent: list[str] = []
    logged: list[str] = []
    access = logging.getLogger("uvicorn.access")
    with serve(settings, access_log=True) as server:
        # uvicorn configures its loggers as it starts: listen once it has.
        handler = _Lines(logged)
        access.addHandler(handler)
        try:
            async with _page(chromium, tmp_path, problems) as page:
                page.on("request", lambda r: sent.append(r.url))
                await page.goto(f"{server.url}/#token={token}")
                await expect(page.locator("#status")).to_have_text("Ready", timeout=_WAIT_MS)
                assert "token" not in page.url
        finally:
            access.removeHandler(handler)
    assert any("/v1/" in line and line.endswith(" 200") for line in logged)  # the API took the token
    assert sent and not any(token in url for url in sent)
    assert not any(token in line for line in logged)
    assert problems == []


class _Lines(logging.Handler):
    """Collects formatted log lines."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def test_the_approval_card_says_where_each_value_came_from(
    settings: Settings, db: Database, owner: str, demo_token: str, chromium: Path, tmp_path: Path
) -> None:
    from tests.conftest import NOW

    token = demo_token
    model = ScriptedModel(steps=[
        call("mail__list", {"from_contains": "billing"}), call("mail__read", {"message_id": "#1"}),
        call("mail__send", {"to": ["billing@example.net"], "subject": "Invoice", "body": "please resend it"}),
    ])
    problems: list[str] = []
    with serve(settings.model_copy(update={"rate_limit_burst": 100_000}), clock=Clock(NOW), picker_model=model) as server:
        async with _page(chromium, tmp_path, problems) as page:
            await page.goto(f"{server.url}/#token={token}")
            await expect(page.locator("#status")).to_have_text("Ready", timeout=_WAIT_MS)
            await _send(page, "read the billing mail and ask them please resend it")
            origins = page.locator(".chip").last.locator(".chip-provenance li")
            await expect(origins.first).to_contain_text(
                "to: from someone else's content: mail “Your invoice is ready” from billing@example.net (mail.read): “",
                timeout=_WAIT_MS)
            preview = page.locator(".chip").last.locator(".chip-preview")
            await expect(preview).to_contain_text("You asked: “read the billing mail and ask them please resend it”")
            await expect(preview).to_contain_text("ⓘ From the content you named: to (mail “Your invoice is ready”")
            # The address and the subject ("Invoice") both come from the stranger's mail; the body was typed.
            await expect(page.locator(".chip-provenance li.foreign")).to_have_count(2)
            await expect(origins.last).to_have_text("body: typed by you")
    assert problems == []


async def test_third_party_text_in_a_reply_renders_as_text_never_as_a_link_an_image_or_html(
    settings: Settings, chromium: Path, tmp_path: Path, demo_token: str
) -> None:
    """An event title or a page can carry markdown or HTML; the reply shows it, inert."""
    from tests.conftest import NOW

    hostile = ("Agenda: ![pixel](http://evil.example/p.png) [click here](http://evil.example/x) "
               "<img src=http://evil.example/q.png> <a href=http://evil.example/y>y</a> and **bold**")
    model = ScriptedModel(steps=[say(hostile)])
    problems: list[str] = []
    with serve(settings.model_copy(update={"rate_limit_burst": 100_000}), clock=Clock(NOW), picker_model=model) as server:
        async with _page(chromium, tmp_path, problems) as page:
            await page.goto(f"{server.url}/#token={demo_token}")
            await expect(page.locator("#status")).to_have_text("Ready", timeout=_WAIT_MS)
            await _send(page, "what's the agenda?")
            reply = page.locator(".msg.assistant .bubble.done").last
            await expect(reply).to_contain_text("click here (http://evil.example/x)", timeout=_WAIT_MS)
            await expect(reply).to_contain_text("[image: pixel (http://evil.example/p.png)]")
            await expect(reply).to_contain_text("<img src=http://evil.example/q.png>")
            assert await reply.locator("img, a, iframe").count() == 0
            assert await reply.locator("strong").count() == 1  # formatting still works
    assert problems == []
