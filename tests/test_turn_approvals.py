"""Write turns: the approval interrupt, every decision, expiry, and refused tokens."""

from __future__ import annotations

from typing import Any

import pytest

from tollgate.graph.runner import TurnOutcome
from tollgate.graph.state import Context
from tollgate.graph.store.db import Database
from tollgate.policies.errors import ApprovalInvalid, InvalidArgs, NotFound, OffListId
from tests.conftest import all_rows
from tests.fakes import ScriptedModel, call, say
from tests.harness import Clock, Turns


async def _events(db: Database, owner: str) -> dict[str, str]:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT title, status FROM calendar_events WHERE owner_id = %s", (owner,))
        return {r["title"]: r["status"] for r in await cur.fetchall()}


async def _effects(db: Database, owner: str) -> int:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM effects WHERE owner_id = %s", (owner,))
        row = await cur.fetchone()
        return int(row["n"]) if row else 0


async def _list_then_cancel_second(turns: Turns, model: ScriptedModel, ctx: Context, thread: str) -> TurnOutcome:
    model.push(call("calendar__list", {"range": "today"}), say(""))
    await turns.send(ctx, thread, "what's on my calendar today")
    model.push(call("calendar__cancel_event", {"event_id": "#2"}))
    out = await turns.send(ctx, thread, "cancel the 2nd one")
    assert out.outcome == "proposed" and out.approval is not None
    return out


async def test_approve_cancels_exactly_the_previewed_event_once(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    out = await _list_then_cancel_second(turns, model, ctx, ctx.owner_id + "/t-approve")
    approval = out.approval
    assert approval is not None
    assert "Lunch with Sam" in approval.preview
    assert approval.args["event_id"].startswith("evt_")  # bound server-side from "#2"
    assert out.events[-1]["type"] == "approval_required"
    assert "token" not in str(out.events[-1]["data"])  # tokens never travel in events
    pending = await turns.runner.pending_approvals(ctx)
    assert [p.approval_id for p in pending] == [approval.approval_id]

    done = await turns.decide(ctx, approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed"
    assert done.reply is not None and "Lunch with Sam" in done.reply
    assert (await _events(db, ctx.owner_id))["Lunch with Sam"] == "cancelled"
    assert await _effects(db, ctx.owner_id) == 1
    assert await turns.runner.pending_approvals(ctx) == []

    with pytest.raises(ApprovalInvalid):  # one approval runs once
        await turns.runner.decide(ctx, approval.approval_id, {"type": "approve"})
    assert await _effects(db, ctx.owner_id) == 1


async def test_reject_changes_nothing_and_says_so(turns: Turns, model: ScriptedModel, ctx: Context, db: Database) -> None:
    out = await _list_then_cancel_second(turns, model, ctx, ctx.owner_id + "/t-reject")
    assert out.approval is not None
    before = await _events(db, ctx.owner_id)
    done = await turns.decide(ctx, out.approval.approval_id, {"type": "reject", "message": "keep it"})
    assert done.outcome == "rejected"
    assert done.reply is not None and "nothing was changed" in done.reply and "keep it" in done.reply
    assert await _events(db, ctx.owner_id) == before
    assert await _effects(db, ctx.owner_id) == 0


async def test_edit_is_validated_then_runs_on_the_edited_target(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    out = await _list_then_cancel_second(turns, model, ctx, ctx.owner_id + "/t-edit")
    assert out.approval is not None
    edit = {"type": "edit", "edited_action": {"name": "calendar__cancel_event", "args": {"event_id": "#3"}}}
    shown = await turns.decide(ctx, out.approval.approval_id, edit)
    # The edit runs nothing yet: it comes back as a new approval with the edited call's own preview.
    assert shown.outcome == "proposed" and shown.approval is not None
    assert shown.approval.approval_id != out.approval.approval_id and "Design review" in shown.approval.preview
    assert (await _events(db, ctx.owner_id))["Design review"] == "confirmed"
    assert [p.approval_id for p in await turns.runner.pending_approvals(ctx)] == [shown.approval.approval_id]
    done = await turns.decide(ctx, shown.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed"
    state = await _events(db, ctx.owner_id)
    assert state["Design review"] == "cancelled" and state["Lunch with Sam"] == "confirmed"
    assert await _effects(db, ctx.owner_id) == 1


async def test_edit_and_run_runs_the_edited_call_at_once(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    out = await _list_then_cancel_second(turns, model, ctx, ctx.owner_id + "/t-edit-run")
    assert out.approval is not None
    edit = {"type": "edit", "run": True,
            "edited_action": {"name": "calendar__cancel_event", "args": {"event_id": "#3"}}}
    done = await turns.decide(ctx, out.approval.approval_id, edit)
    assert done.outcome == "executed"
    state = await _events(db, ctx.owner_id)
    assert state["Design review"] == "cancelled" and state["Lunch with Sam"] == "confirmed"


def _nested(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"k": value}
    return value


@pytest.mark.parametrize(
    ("edited", "error"),
    [
        pytest.param({"name": "calendar__cancel_event", "args": {"event_id": "evt_notinlist"}}, OffListId,
                     id="off-list-id"),
        pytest.param({"name": "calendar__cancel_event", "args": {"event_id": "#2", "owner_id": "x"}}, InvalidArgs,
                     id="extra-owner-key"),
        pytest.param({"name": "mail__send", "args": {"to": ["x@evil.example"], "subject": "s", "body": "b"}},
                     ApprovalInvalid, id="switch-action"),
        pytest.param({"name": "calendar__cancel_event", "args": {"event_id": 2}}, InvalidArgs, id="wrong-type"),
        pytest.param({"name": "calendar__cancel_event", "args": {"event_id": _nested(300)}}, InvalidArgs,
                     id="nested-300-levels"),
    ],
)
async def test_an_invalid_edit_is_refused_with_a_typed_error_and_the_approval_stays_pending(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database, edited: dict[str, Any], error: type[Exception]
) -> None:
    out = await _list_then_cancel_second(turns, model, ctx, ctx.owner_id + "/t-bad-edit")
    assert out.approval is not None
    before = await _events(db, ctx.owner_id)
    with pytest.raises(error):
        await turns.decide(ctx, out.approval.approval_id, {"type": "edit", "edited_action": edited})
    assert await _events(db, ctx.owner_id) == before
    assert await _effects(db, ctx.owner_id) == 0
    assert [p.approval_id for p in await turns.runner.pending_approvals(ctx)] == [out.approval.approval_id]
    done = await turns.decide(ctx, out.approval.approval_id, {"type": "approve"})  # still decidable, runs once
    assert done.outcome == "executed" and await _effects(db, ctx.owner_id) == 1


async def test_approve_after_expiry_runs_nothing_and_says_so(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database, clock: Clock
) -> None:
    out = await _list_then_cancel_second(turns, model, ctx, ctx.owner_id + "/t-expired")
    assert out.approval is not None
    clock.advance(days=4)
    done = await turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "expired"
    assert done.reply is not None and "expired" in done.reply and "Nothing was changed" in done.reply
    decided = [e for e in done.events if e["type"] == "approval_decided"]
    assert decided[0]["data"]["code"] == "approval_expired"
    assert (await _events(db, ctx.owner_id))["Lunch with Sam"] == "confirmed"


async def _pending_token(turns: Turns, thread: str) -> str:
    snapshot = await turns.runner.graph.aget_state({"configurable": {"thread_id": thread}})
    return str(snapshot.tasks[-1].interrupts[0].value["approval"]["token"])


def _tamper(token: str) -> str:
    version, claims, mac = token.split(".")
    flipped = "A" if mac[0] != "A" else "B"
    return f"{version}.{claims}.{flipped}{mac[1:]}"


async def test_tampered_foreign_and_reused_tokens_are_refused_and_nothing_runs(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    out = await _list_then_cancel_second(turns, model, ctx, ctx.owner_id + "/t-tokens")
    assert out.approval is not None
    token = await _pending_token(turns, ctx.owner_id + "/t-tokens")
    approve = [{"type": "approve"}]

    with pytest.raises(ApprovalInvalid, match="signature"):
        await turns.runner.resume(ctx, ctx.owner_id + "/t-tokens", {"token": _tamper(token), "decisions": approve})
    with pytest.raises(ApprovalInvalid, match="malformed"):
        await turns.runner.resume(ctx, ctx.owner_id + "/t-tokens", {"token": "not-a-token", "decisions": approve})
    with pytest.raises(ApprovalInvalid):
        await turns.runner.resume(ctx, ctx.owner_id + "/t-tokens", {"token": token, "decisions": [{"type": "approve", "owner_id": "x"}]})

    # Another thread of the same owner, with its own pending approval: tokens do not cross.
    other = await _list_then_cancel_second(turns, model, ctx, ctx.owner_id + "/t-tokens-other")
    assert other.approval is not None
    with pytest.raises(ApprovalInvalid, match="another thread"):
        await turns.runner.resume(ctx, ctx.owner_id + "/t-tokens-other", {"token": token, "decisions": approve})

    # Another owner can neither use the token nor learn that the thread exists.
    intruder = Context(owner_id=ctx.owner_id + "x", timezone="UTC")
    with pytest.raises(NotFound):
        await turns.runner.resume(intruder, ctx.owner_id + "/t-tokens", {"token": token, "decisions": approve})
    with pytest.raises(NotFound):
        await turns.runner.decide(intruder, out.approval.approval_id, {"type": "approve"})

    assert await _effects(db, ctx.owner_id) == 0
    done = await turns.resume(ctx, ctx.owner_id + "/t-tokens", {"token": token, "decisions": approve})  # the genuine one still works
    assert done.outcome == "executed"
    with pytest.raises(ApprovalInvalid, match="nothing is pending"):  # reused
        await turns.runner.resume(ctx, ctx.owner_id + "/t-tokens", {"token": token, "decisions": approve})
    assert await _effects(db, ctx.owner_id) == 1


async def test_new_message_supersedes_a_pending_approval(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    out = await _list_then_cancel_second(turns, model, ctx, ctx.owner_id + "/t-supersede")
    assert out.approval is not None
    token = await _pending_token(turns, ctx.owner_id + "/t-supersede")
    model.push(say("Hello!"))
    later = await turns.send(ctx, ctx.owner_id + "/t-supersede", "hi")
    assert later.reply is not None and "will not run" in later.reply
    with pytest.raises(ApprovalInvalid):
        await turns.runner.decide(ctx, out.approval.approval_id, {"type": "approve"})
    with pytest.raises(ApprovalInvalid):
        await turns.runner.resume(ctx, ctx.owner_id + "/t-supersede", {"token": token, "decisions": [{"type": "approve"}]})
    assert (await _events(db, ctx.owner_id))["Lunch with Sam"] == "confirmed"


async def test_creating_an_event_round_trips_its_time_through_the_approval(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    model.push(call("calendar__create", {"title": "Lunch with Ana", "start": "2026-12-01T13:00:00+01:00", "duration_minutes": 60}))
    out = await turns.send(ctx, ctx.owner_id + "/create", "schedule lunch with Ana tomorrow at 1pm for an hour")
    assert out.approval is not None and "Lunch with Ana" in out.approval.preview
    done = await turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed"
    async with all_rows(db) as conn:
        cur = await conn.execute(
            "SELECT starts_at, ends_at FROM calendar_events WHERE owner_id = %s AND title = 'Lunch with Ana'", (ctx.owner_id,)
        )
        rows = await cur.fetchall()
    assert len(rows) == 1
    assert rows[0]["starts_at"].isoformat() == "2026-12-01T12:00:00+00:00"
    assert (rows[0]["ends_at"] - rows[0]["starts_at"]).total_seconds() == 3600


async def test_a_daily_reminder_is_stored_with_its_recurrence_and_local_zone(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    model.push(call("reminders__create", {"text": "take vitamins", "due_at": "2026-12-01T08:00:00+01:00", "repeat": "daily"}))
    out = await turns.send(ctx, ctx.owner_id + "/daily", "remind me every day at 8am to take vitamins")
    assert out.approval is not None and "every day" in out.approval.preview
    done = await turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed"
    async with all_rows(db) as conn:
        cur = await conn.execute(
            "SELECT recurrence, recurrence_tz FROM reminders WHERE owner_id = %s AND text = 'take vitamins'", (ctx.owner_id,)
        )
        row = await cur.fetchone()
    assert row == {"recurrence": "daily", "recurrence_tz": "Europe/Paris"}
