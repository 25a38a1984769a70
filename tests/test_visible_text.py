"""Third-party text is shown as it is: bidi controls cannot reorder what the owner reads."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tollgate.graph.state import Context
from tollgate.graph.store.db import Database
from tests.conftest import NOW, all_rows
from tests.fakes import ScriptedModel, call, say
from tests.harness import Turns
from tollgate.tools._ids import new_id


async def test_bidi_controls_in_third_party_text_are_shown_not_obeyed_in_lists_cards_and_replies(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    """An event titled ``Pay \\u202egnp.exe\\u202c invoice`` would read "Pay exe.png invoice"."""
    start = NOW + timedelta(hours=2)
    async with all_rows(db) as conn:
        await conn.execute(
            "INSERT INTO calendar_events (id, owner_id, title, starts_at, ends_at) VALUES (%s, %s, %s, %s, %s)",
            (new_id("evt"), ctx.owner_id, "Pay \u202egnp.exe\u202c invoice", start, start + timedelta(minutes=30)))
    thread = ctx.owner_id + "/bidi"
    model.push(call("calendar__list", {"range": "today"}), say("Your first event: Pay \u202egnp.exe\u202c invoice."))
    listed = await turns.send(ctx, thread, "what's on today")
    assert listed.reply is not None and "\u202e" not in listed.reply and "[U+202E]gnp.exe[U+202C]" in listed.reply
    model.push(lambda prompt: call("calendar__cancel_event", {"event_id": next(
        row["id"] for row in _rows(prompt) if "gnp.exe" in row["label"])}))
    out = await turns.send(ctx, thread, "cancel the invoice one")
    assert out.approval is not None
    assert "\u202e" not in out.approval.preview and "Pay [U+202E]gnp.exe[U+202C] invoice" in out.approval.preview


def _rows(prompt: list[Any]) -> list[dict[str, Any]]:
    from tollgate.nodes.picker_prompt import context_of

    context = context_of(prompt) or {}
    return [row for rows in context.get("recent", {}).values() for row in rows]
