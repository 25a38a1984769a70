"""Approval cards say where every value came from, and warn when it is someone else's content."""

from __future__ import annotations

from graph.state import Context
from graph.store.db import Database
from policies.flow import origin_of, shown_from
from tests.conftest import all_rows
from tests.fakes import ScriptedModel, call, say
from tests.harness import Turns


async def test_a_recipient_taken_from_a_strangers_mail_is_named_and_warned_on_the_card(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    model.push(call("mail__list", {"from_contains": "billing"}), call("mail__read", {"message_id": "#1"}),
               call("mail__send", {"to": ["billing@example.net"], "subject": "Your invoice is ready",
                                   "body": "please resend it as a PDF"}))
    out = await turns.send(ctx, ctx.owner_id + "/prov", "read the billing mail and ask them please resend it as a PDF")
    assert out.approval is not None
    (action,) = out.approval.actions
    source = "mail.read “Your invoice is ready” from billing@example.net"
    assert action.provenance == {
        "to": f"from {source} (someone else's content)",
        "subject": f"from {source} (someone else's content)",
        "body": "typed by you",
    }
    assert out.approval.preview.startswith(f"⚠ From someone else's content, not from you: to (from {source})")
    # The interrupt carries it as data, for Studio and any other HITL client.
    snapshot = await turns.runner.graph.aget_state({"configurable": {"thread_id": ctx.owner_id + "/prov"}})
    request = snapshot.tasks[-1].interrupts[0].value
    assert request["action_requests"][0]["provenance"]["body"] == "typed by you"


async def test_values_the_user_typed_or_the_owners_own_data_carry_no_warning(
    turns: Turns, model: ScriptedModel, ctx: Context
) -> None:
    model.push(call("tasks__list", {}), call("tasks__create", {"title": "Send the quarterly report again"}))
    out = await turns.send(ctx, ctx.owner_id + "/own", "add a task")
    assert out.approval is not None
    assert out.approval.actions[0].provenance == {"title": "from tasks.list"}
    assert not out.approval.preview.startswith("⚠")


async def test_a_time_the_server_returned_is_labelled_a_server_fact(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    """A reminder set for the start of a listed event: its time is the server's, not the model's invention."""
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT starts_at FROM calendar_events WHERE owner_id = %s AND title = 'Design review'",
                                 (ctx.owner_id,))
        row = await cur.fetchone()
    assert row is not None
    model.push(call("calendar__list", {"range": "today"}), say(""))
    await turns.send(ctx, ctx.owner_id + "/fact", "what's on today?")
    start = row["starts_at"].isoformat()  # as the event's item carries it
    model.push(call("calendar__get", {"event_id": "#3"}),
               call("reminders__create", {"text": "Prepare the review", "due_at": start}))
    out = await turns.send(ctx, ctx.owner_id + "/fact", "remind me when the design review starts")
    assert out.approval is not None
    where = out.approval.actions[0].provenance
    assert where["due_at"] == "a server fact from calendar.get “Design review”", where
    assert where["text"] == "chosen by the model"


def test_origin_of_a_server_fact() -> None:
    shown = shown_from([("calendar.list", "2026-12-01T12:30:00+01:00"), ("calendar.list", "Lunch with Sam at noon")],
                       ["move lunch"])
    assert origin_of("2026-12-01T12:30:00+01:00", shown) == ("fact", "calendar.list")
    assert origin_of("2026-12-01T11:30:00Z", shown) == ("fact", "calendar.list")  # the same instant, written in UTC
    assert origin_of("2026-12-02T12:30:00+01:00", shown)[0] == "model"  # a time nobody returned (digits share no "span")
