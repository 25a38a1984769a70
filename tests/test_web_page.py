"""The page as a person uses it, in headless Chromium at phone (390×844) and desktop (1280×800) size.

Each screen is checked with axe-core (vendored, ``tests/assets``; 0 serious or critical
violations) and saved as a screenshot under ``artifacts/``. The browser context bypasses the
page's CSP only so the test can inject axe; the page's own scripts are all ``/static`` files.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import Page, async_playwright, expect

from tollgate.graph.settings import Settings
from tests.fakes import ScriptedModel, say
from tests.harness import Clock
from tests.server_harness import Api, LiveServer, serve
from tests.test_web_browser import _ARGS, _ARTIFACTS, _WAIT_MS, _send, chromium  # noqa: F401 - fixture

_AXE = Path(__file__).resolve().parent / "assets" / "axe.min.js"
_SIZES = {"phone": {"width": 390, "height": 844}, "desktop": {"width": 1280, "height": 800}}


@asynccontextmanager
async def _browser(chromium: Path, tmp_path: Path, size: str, scheme: str = "light") -> AsyncIterator[Page]:
    async with async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(tmp_path / f"profile-{size}-{scheme}"), executable_path=str(chromium), headless=True, args=_ARGS,
            viewport=_SIZES[size], color_scheme=scheme, bypass_csp=True,  # type: ignore[arg-type]
        )
        try:
            page = context.pages[0] if context.pages else await context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page
            assert errors == []
        finally:
            await context.close()


async def _check(page: Page, name: str) -> None:
    """No serious or critical accessibility violation on this screen, and a screenshot of it."""
    if not await page.evaluate("() => typeof axe !== 'undefined'"):
        await page.add_script_tag(path=str(_AXE))
    found = await page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
               .filter(v => v.impact === 'serious' || v.impact === 'critical')
               .map(v => `${v.id}: ${v.nodes.map(n => n.target.join(' ')).join(', ')}`)"""
    )
    assert found == [], f"{name}: {found}"
    _ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(_ARTIFACTS / f"page-{name}.png"), full_page=True)


async def _fits(page: Page) -> None:
    """Nothing is wider than the screen, and Send is on it."""
    width = await page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= await page.evaluate("() => window.innerWidth")
    box = await page.locator("#send").bounding_box()
    viewport = page.viewport_size
    assert box is not None and viewport is not None
    assert box["x"] + box["width"] <= viewport["width"] and box["y"] + box["height"] <= viewport["height"]


@pytest.mark.parametrize("size", ["phone", "desktop"])
async def test_chat_approve_and_reload_keeps_the_history(
    api: Api, live_server: LiveServer, chromium: Path, tmp_path: Path, size: str
) -> None:
    async with _browser(chromium, tmp_path, size) as page:
        await page.goto(f"{live_server.url}/#token={api.token}")
        await expect(page.locator("#status")).to_have_text("Ready", timeout=_WAIT_MS)
        await _fits(page)
        await _check(page, f"{size}-empty")

        await _send(page, "what's on my calendar today?")
        reply = page.locator(".msg.assistant .bubble.done").last
        await expect(reply).to_contain_text("Lunch with Sam", timeout=_WAIT_MS)
        await expect(reply.locator("ol > li")).to_have_count(3)  # the reply's list, rendered as markdown
        await expect(page.locator(".msg .meta time").first).not_to_be_empty()
        await _send(page, "cancel the 2nd one")
        chip = page.locator(".chip").last
        await expect(chip.locator(".chip-preview")).to_contain_text("Lunch with Sam", timeout=_WAIT_MS)
        await _fits(page)
        await _check(page, f"{size}-approval")
        await chip.locator("button.approve").click()
        await expect(page.locator(".msg.assistant .bubble.done").last).to_contain_text("Cancelled", timeout=_WAIT_MS)

        await page.reload()  # decided approvals stay, with their decision, who and how
        history = page.locator(".chip.history")
        await expect(history).to_have_count(1, timeout=_WAIT_MS)
        await expect(history.locator(".chip-state")).to_contain_text(f"approve by {api.owner} via the web page")
        await expect(page.locator("#thread-title")).to_have_text("what's on my calendar today?")
        await _check(page, f"{size}-history")

        if size == "phone":
            await expect(page.locator("#threads")).to_be_hidden()
            await page.click("#open-threads")
            await expect(page.locator("#threads")).to_be_visible()
            await expect(page.locator("#thread-list button.thread").first).to_be_visible()
            await _check(page, "phone-threads")
            await page.keyboard.press("Escape")
            await expect(page.locator("#threads")).to_be_hidden()
            await page.click("#open-side")
            await expect(page.locator("#side")).to_be_visible()
            await _check(page, "phone-details")
        else:
            # The thread list by keyboard alone: focus a thread, Enter opens it.
            await page.click("#new-thread")
            await expect(page.locator("#messages li")).to_have_count(0)
            await page.locator("#thread-list button.thread").first.focus()
            await page.keyboard.press("Enter")
            await expect(page.locator(".chip.history")).to_have_count(1, timeout=_WAIT_MS)


@pytest.mark.parametrize("size", ["phone", "desktop"])
async def test_dark_mode_follows_the_system(
    api: Api, live_server: LiveServer, chromium: Path, tmp_path: Path, size: str
) -> None:
    async with _browser(chromium, tmp_path, size, scheme="dark") as page:
        await page.goto(f"{live_server.url}/#token={api.token}")
        await expect(page.locator("#status")).to_have_text("Ready", timeout=_WAIT_MS)
        await _send(page, "what's on my calendar today?")
        await expect(page.locator(".bubble.done").last).to_contain_text("Lunch with Sam", timeout=_WAIT_MS)
        background = await page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(20, 23, 28)"
        await _check(page, f"{size}-dark")


@pytest.mark.parametrize("size", ["phone", "desktop"])
async def test_a_failed_send_keeps_the_text_and_says_why(
    live_server: LiveServer, chromium: Path, tmp_path: Path, size: str
) -> None:
    async with _browser(chromium, tmp_path, size) as page:
        await page.goto(f"{live_server.url}/#token=tg_not-a-real-token")
        await _send(page, "what's on my calendar today?")
        await expect(page.locator("#send-error")).to_contain_text("Not sent:", timeout=_WAIT_MS)
        await expect(page.locator("#message")).to_have_value("what's on my calendar today?")
        await expect(page.locator(".msg.user")).to_have_count(0)
        await _check(page, f"{size}-send-failed")


@pytest.mark.parametrize("size", ["phone", "desktop"])
async def test_rename_search_and_delete_from_the_page(
    api: Api, live_server: LiveServer, chromium: Path, tmp_path: Path, size: str
) -> None:
    async with _browser(chromium, tmp_path, size) as page:
        await page.goto(f"{live_server.url}/#token={api.token}")
        await _send(page, "what's on my calendar today?")
        await expect(page.locator(".bubble.done").last).to_contain_text("Lunch with Sam", timeout=_WAIT_MS)
        page.once("dialog", lambda d: d.accept("Plans"))
        await page.click("#rename-thread")
        await expect(page.locator("#thread-title")).to_have_text("Plans")
        await expect(page.locator("#thread-list button.thread").first).to_contain_text("Plans")
        if size == "phone":
            await page.click("#open-threads")
        await page.fill("#thread-search", "nothing like this")
        await expect(page.locator("#thread-list li.empty")).to_have_text("No thread matches.")
        await page.fill("#thread-search", "plans")
        await expect(page.locator("#thread-list button.thread")).to_have_count(1)
        await _check(page, f"{size}-search")
        if size == "phone":
            await page.keyboard.press("Escape")  # closes the drawer, and only that: the search stays
            await page.wait_for_timeout(400)  # longer than the search box's debounce
            await expect(page.locator("#thread-search")).to_have_value("plans")
        page.once("dialog", lambda d: d.accept())
        await page.click("#delete-thread")
        await expect(page.locator("#thread-title")).to_have_text("New chat")
        await expect(page.locator("#thread-list li.empty")).to_have_text("No thread matches.")  # the search stays


async def test_replies_are_markdown_with_nothing_that_runs(
    settings: Settings, demo_token: str, chromium: Path, tmp_path: Path
) -> None:
    from tests.conftest import NOW

    token = demo_token
    hostile = ("**Done.** See [the page](javascript:alert(1)) <img src=x onerror=\"window.pwned=1\">"
               "<script>window.pwned=2</script>\n\n- one\n- two")
    model = ScriptedModel(steps=[say(hostile)])
    with serve(settings, clock=Clock(NOW), picker_model=model) as server:
        async with _browser(chromium, tmp_path, "desktop") as page:
            await page.goto(f"{server.url}/#token={token}")
            await _send(page, "hello")
            reply = page.locator(".bubble.done").last
            await expect(reply.locator("strong")).to_have_text("Done.", timeout=_WAIT_MS)
            await expect(reply.locator("ul > li")).to_have_count(2)
            assert await reply.locator("script").count() == 0
            assert await reply.locator("img[onerror]").count() == 0
            assert await reply.locator("a").count() == 0  # a link is shown as its text and address, never live
            await expect(reply).to_contain_text("the page (javascript:alert(1))")
            assert await page.evaluate("() => window.pwned === undefined")


@pytest.mark.parametrize("size", ["phone", "desktop"])
async def test_stop_retry_copy_and_a_thinking_placeholder(
    settings: Settings, demo_token: str, chromium: Path, tmp_path: Path, size: str
) -> None:
    from tests.conftest import NOW

    model = ScriptedModel(steps=[say("**First** reply.")])
    with serve(settings.model_copy(update={"rate_limit_burst": 1000}), clock=Clock(NOW), picker_model=model) as server:
        async with _browser(chromium, tmp_path, size) as page:
            await page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
            await page.goto(f"{server.url}/#token=tg_not-a-real-token")
            await _send(page, "hello")
            await expect(page.locator("#send-error")).to_contain_text("Not sent:", timeout=_WAIT_MS)
            await page.fill("#token", demo_token)
            await page.click("#save-token")
            await page.locator("button.retry").click()  # the same message again, now with a good token
            reply = page.locator(".bubble.done").last
            await expect(reply.locator("strong")).to_have_text("First", timeout=_WAIT_MS)
            await expect(page.locator("#send-error")).to_be_hidden()
            await expect(page.locator(".msg.user .bubble")).to_have_text(["hello"])

            await page.locator(".msg.assistant .copy").last.click()
            await expect(page.locator(".msg.assistant .copy").last).to_have_text("Copied")
            assert await page.evaluate("() => navigator.clipboard.readText()") == "**First** reply."

            model.latency = 30.0  # a slow model: stop it while it thinks
            await _send(page, "think hard")
            await expect(page.locator(".bubble.thinking")).to_have_text("Thinking…")
            await expect(page.locator("#stop")).to_be_visible()
            await _check(page, f"{size}-thinking")
            await page.click("#stop")
            await expect(page.locator(".msg.stopped .bubble")).to_contain_text("Stopped", timeout=10_000)
            await expect(page.locator("#stop")).to_be_hidden()
            await expect(page.locator(".bubble.thinking")).to_have_count(0)

            model.latency = 0.0
            model.steps[:] = [say("Back again.")]
            await _send(page, "are you there?")
            await expect(page.locator(".bubble.done").last).to_have_text("Back again.", timeout=_WAIT_MS)
            await _check(page, f"{size}-markdown-stopped-retried")


async def test_chat_and_approve_by_keyboard_alone(api: Api, live_server: LiveServer, chromium: Path, tmp_path: Path) -> None:
    async with _browser(chromium, tmp_path, "desktop") as page:
        await page.goto(f"{live_server.url}/#token={api.token}")
        await expect(page.locator("#status")).to_have_text("Ready", timeout=_WAIT_MS)
        await page.focus("#message")
        await page.keyboard.type("what's on my calendar today?")
        await page.keyboard.press("Enter")  # Enter sends (Shift+Enter would add a line)
        await expect(page.locator(".bubble.done").last).to_contain_text("Lunch with Sam", timeout=_WAIT_MS)
        await page.keyboard.type("cancel the 2nd one")
        await page.keyboard.press("Enter")
        chip = page.locator(".chip").last
        await expect(chip.locator(".chip-preview")).to_contain_text("Lunch with Sam", timeout=_WAIT_MS)
        for _ in range(80):  # Tab through the page until the chip's Approve has the focus
            await page.keyboard.press("Tab")
            if await page.evaluate("() => document.activeElement.classList.contains('approve')"):
                break
        else:
            pytest.fail("Tab never reached the approval's Approve button")
        await page.keyboard.press("Enter")
        await expect(page.locator(".bubble.done").last).to_contain_text("Cancelled", timeout=_WAIT_MS)
