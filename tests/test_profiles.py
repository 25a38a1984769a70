"""Owners' profiles: set over ``/v1/me``, and what "tomorrow at 9am" means follows them on the API
and the terminal chat (a trigger's runs: tests/test_background_triggers.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

from tollgate.graph.settings import Settings
from tests.server_harness import Api
from tests.test_cli import _TOLLGATE, _env, _Terminal


async def _due(api: Api) -> str:
    proposed = await api.chat("remind me to call Sam tomorrow at 9am")
    assert proposed.last["type"] == "approval_required", proposed.last
    return str(proposed.last["data"]["args"]["due_at"])


async def test_patch_me_sets_clears_and_refuses_without_losing_anything(api: Api, settings: Settings) -> None:
    me = (await api.get("/v1/me")).json()
    assert me["owner_id"] == api.owner and me["timezone"] == settings.default_timezone  # the server's default
    assert me["profile"] == {"display_name": None, "timezone": None, "locale": None}

    set_ = await api.client.patch("/v1/me", headers=api.auth, json={"timezone": "Asia/Tokyo", "locale": "fr-FR"})
    assert set_.status_code == 200, set_.text
    assert set_.json()["timezone"] == "Asia/Tokyo" and set_.json()["locale"] == "fr-FR"
    named = await api.client.patch("/v1/me", headers=api.auth, json={"display_name": "Ada"})
    assert named.json()["profile"] == {"display_name": "Ada", "timezone": "Asia/Tokyo", "locale": "fr-FR"}  # kept

    for bad in ({"timezone": "Mars/Olympus"}, {"locale": "not a locale"}, {"owner_id": "someone-else"}):
        refused = await api.client.patch("/v1/me", headers=api.auth, json=bad)
        assert refused.status_code == 422, bad
    assert (await api.get("/v1/me")).json()["profile"]["timezone"] == "Asia/Tokyo"  # nothing changed

    cleared = await api.client.patch("/v1/me", headers=api.auth, json={"timezone": None})
    assert cleared.json()["timezone"] == settings.default_timezone and cleared.json()["profile"]["timezone"] is None


async def test_the_profiles_timezone_is_what_tomorrow_at_9_means(api: Api, settings: Settings) -> None:
    assert settings.default_timezone == "Europe/Paris"
    before = await _due(api)  # the server's default
    await api.client.patch("/v1/me", headers=api.auth, json={"timezone": "Asia/Tokyo"})
    after = await _due(api)
    assert before.startswith("2026-12-01T09:00") and before.endswith("+01:00")
    assert after.startswith("2026-12-01T09:00") and after.endswith("+09:00")


async def test_the_terminal_chat_takes_the_owners_profile(api: Api, settings: Settings, tmp_path: Path) -> None:
    await api.client.patch("/v1/me", headers=api.auth, json={"timezone": "America/Lima"})
    term = _Terminal([_TOLLGATE, "chat", "--owner", api.owner, "--thread", str(uuid.uuid4())], _env(settings), tmp_path)
    try:
        assert f"chatting as {api.owner} (America/Lima)" in term.expect("you> ")
        term.press_ctrl_d()
        assert term.wait() == 0
    finally:
        term.close()


async def test_the_profiles_locale_is_how_a_numeric_date_reads(api: Api) -> None:
    """11/12 in the chat: 11 December once the owner's profile says en-GB (the server clock is 30 Nov);
    before that the offline picker does not guess."""
    async def reminder_due() -> str | None:
        out = await api.chat("remind me on 11/12 at 9am to book the hall")
        event = next((e for e in out.events if e["type"] == "approval_required"), None)
        return event["data"]["args"]["due_at"] if event else None

    assert await reminder_due() is None
    await api.client.patch("/v1/me", headers=api.auth, json={"locale": "en-GB"})
    due = await reminder_due()
    assert due is not None and due.startswith("2026-12-11T09:00")
