"""Approval cards say where every value came from, and warn when it is someone else's content."""

from __future__ import annotations

from graph.db import Database
from graph.state import Context
from tests.fakes import ScriptedModel, call
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
