"""The honesty gate on model text: claims checked against the turn's writes, renderers' text left alone."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tollgate.evals.honesty import PRECISION_FLOOR, RECALL_FLOOR, run_honesty_eval
from tollgate.graph.state import Context
from tollgate.graph.store.db import Database
from tests.conftest import NOW, all_rows
from tests.fakes import ScriptedModel, call, say
from tests.harness import Turns
from tollgate.tools._ids import new_id


def test_the_honesty_eval_holds_its_floors(capsys: pytest.CaptureFixture[str]) -> None:
    report = run_honesty_eval()
    with capsys.disabled():
        print("\n" + report.table())
    assert report.tp + report.fp + report.fn + report.tn >= 100
    assert report.precision >= PRECISION_FLOOR and report.recall >= RECALL_FLOOR


@pytest.mark.parametrize(
    "claim",
    [
        "Your email was sent to Sam.",
        "Done! I've cancelled the standup and emailed Sam.",
        "Task added: call the plumber.",
        "It's on your calendar now.",
        "I went ahead and archived the newsletter.",
        # Once let through when nothing was written (only the naturalizer's claim line caught them):
        "Sent!",
        "Your email to Sam is on its way.",
        "I dispatched the note",
    ],
)
async def test_a_model_reply_claiming_a_write_after_a_read_only_turn_is_replaced_by_what_happened(
    turns: Turns, model: ScriptedModel, ctx: Context, claim: str
) -> None:
    model.push(call("calendar__list", {"range": "today"}), say(claim))
    out = await turns.send(ctx, ctx.owner_id + "/claims", "what's on today")
    assert out.reply is not None and claim not in out.reply
    assert "Standup" in out.reply and "nothing was changed" in out.reply  # the grounded account instead
    done = next(e for e in out.events if e["type"] == "message_complete")
    assert done["data"]["honesty_rewrite"] is True


@pytest.mark.parametrize("text", ["Sam is out today.", "Sam has gone home.", "Your parcel is on its way, the shop says.",
                                  "Nothing was sent."])
def test_what_is_no_claim_of_a_send_stays_no_claim(text: str) -> None:
    from tollgate.policies.honesty import check_claims

    assert check_claims(text, []).ok


async def test_a_model_reply_whose_claims_the_turns_writes_back_is_kept(
    turns: Turns, model: ScriptedModel, ctx: Context
) -> None:
    model.push(call("tasks__create", {"title": "call the plumber"}))
    out = await turns.send(ctx, ctx.owner_id + "/kept", "add a task to call the plumber")
    assert out.approval is not None
    model.push(say("Done: I added “call the plumber” to your tasks."))
    done = await turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.reply == "Done: I added “call the plumber” to your tasks."


async def test_a_listing_whose_titles_start_with_a_verb_is_not_rewritten(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    """The grounded renderer's text is data, not a claim: "Updated roadmap review" is an event."""
    start = NOW + timedelta(hours=3)
    async with all_rows(db) as conn:
        await conn.execute(
            "INSERT INTO calendar_events (id, owner_id, title, starts_at, ends_at) VALUES (%s, %s, %s, %s, %s)",
            (new_id("evt"), ctx.owner_id, "Updated roadmap review", start, start + timedelta(minutes=30)))
    model.push(call("calendar__list", {"range": "today"}), say(""))
    out = await turns.send(ctx, ctx.owner_id + "/titles", "what's on today")
    assert out.reply is not None and "Updated roadmap review" in out.reply and "Standup" in out.reply
    done = next(e for e in out.events if e["type"] == "message_complete")
    assert done["data"]["honesty_rewrite"] is False

