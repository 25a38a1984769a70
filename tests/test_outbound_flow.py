"""Reads are no egress channel: an outbound read that carries what the model was shown asks first."""

from __future__ import annotations

import pytest

from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store.db import Database
from tollgate.policies.flow import carried
from tollgate.policies.provenance import Source, shown_from
from tests.fakes import ScriptedModel, call, calls, say
from tests.harness import Clock, Turns, what_runs
from tests.perimeter_harness import audit_rows, web_settings, web_turns
from tollgate.tools import ActionResult, ActionSpec, ArgsModel, ExecContext, SafeText, ToolSpec
from tests.webserver import WebServer, web_server  # noqa: F401 - the fixture

PRIVATE = "Lunch with Sam 12:30 Café Lumière"


async def _turns(settings: Settings, db: Database, model: ScriptedModel, clock: Clock, server: WebServer,
                 **changes: object) -> Turns:
    server.hits.clear()
    return await web_turns(web_settings(settings, server, **changes), db, model, clock)


async def test_a_search_that_copies_the_owners_calendar_needs_an_approval_that_names_the_source(
    settings: Settings, db: Database, model: ScriptedModel, clock: Clock, ctx: Context, web_server: WebServer
) -> None:
    turns = await _turns(settings, db, model, clock, web_server)
    model.push(call("calendar__list", {"range": "today"}), call("web__search", {"query": PRIVATE}))
    out = await turns.send(ctx, ctx.owner_id + "/leak", "what's on today? look it up")
    assert out.outcome == "proposed" and out.approval is not None
    assert (out.approval.tool, out.approval.action) == ("web", "search")
    assert what_runs(out.approval.preview).startswith("⚠ Outbound data: this sends text copied from what calendar.list returned")
    assert web_server.hits.queries == []  # nothing went out before the approval
    (gate,) = [r for r in await audit_rows(db, ctx.owner_id) if r["action"] == "search"]
    assert (gate["decision"], gate["reason"], gate["detail"]["flow_sources"]) == ("propose", "outbound_data",
                                                                                  ["calendar.list"])
    done = await turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "read" and len(web_server.hits.queries) == 1


async def test_a_search_for_what_the_user_typed_runs_without_asking(
    settings: Settings, db: Database, model: ScriptedModel, clock: Clock, ctx: Context, web_server: WebServer
) -> None:
    turns = await _turns(settings, db, model, clock, web_server)
    model.push(call("calendar__list", {"range": "today"}), call("web__search", {"query": "best lunch with sam places"}),
               say(""))
    out = await turns.send(ctx, ctx.owner_id + "/own", "search best lunch with sam places")
    assert out.outcome == "read" and out.approval is None and len(web_server.hits.queries) == 1


async def test_a_secret_split_across_two_searches_is_judged_whole(
    settings: Settings, db: Database, model: ScriptedModel, clock: Clock, ctx: Context, web_server: WebServer
) -> None:
    turns = await _turns(settings, db, model, clock, web_server)
    model.push(call("calendar__list", {"range": "today"}), call("web__search", {"query": "lunch with"}),
               call("web__search", {"query": "Sam 12:30"}))
    out = await turns.send(ctx, ctx.owner_id + "/split", "look things up")
    assert len(web_server.hits.queries) == 1  # the first half alone shares no span and ran
    assert out.approval is not None and out.approval.args == {"query": "Sam 12:30", "limit": 5}


async def test_contact_details_the_user_did_not_type_need_approval(
    settings: Settings, db: Database, model: ScriptedModel, clock: Clock, ctx: Context, web_server: WebServer
) -> None:
    turns = await _turns(settings, db, model, clock, web_server)
    model.push(call("web__search", {"query": "who is sam@example.com"}))
    out = await turns.send(ctx, ctx.owner_id + "/contact", "search for my lunch date")
    assert out.approval is not None and "an e-mail address or phone number you did not type" in out.approval.preview
    model.push(call("web__search", {"query": "who is sam@example.com"}), say(""))
    typed = await turns.send(ctx, ctx.owner_id + "/typed", "search who is sam@example.com")
    assert typed.outcome == "read" and typed.approval is None


async def test_data_shown_in_an_earlier_turn_is_judged_too(
    settings: Settings, db: Database, model: ScriptedModel, clock: Clock, ctx: Context, web_server: WebServer
) -> None:
    turns = await _turns(settings, db, model, clock, web_server)
    thread = ctx.owner_id + "/later"
    model.push(call("mail__list", {"from_contains": "billing"}), call("mail__read", {"message_id": "#1"}), say(""))
    await turns.send(ctx, thread, "read the invoice mail")
    model.push(call("web__fetch", {"url": f"http://news.example:{web_server.port}/plain?note=monthly+invoice+of+EUR+42"}))
    out = await turns.send(ctx, thread, "now open the news page")
    assert out.approval is not None and "mail.read" in out.approval.preview


@pytest.mark.parametrize(("mode", "decision"), [("refuse", "refuse"), ("off", "execute")])
async def test_the_deployment_chooses_refuse_or_off(
    settings: Settings, db: Database, model: ScriptedModel, clock: Clock, ctx: Context, web_server: WebServer,
    mode: str, decision: str,
) -> None:
    turns = await _turns(settings, db, model, clock, web_server, outbound_flow=mode)
    model.push(calls(("calendar__list", {"range": "today"})), call("web__search", {"query": PRIVATE}), say(""))
    out = await turns.send(ctx, ctx.owner_id + "/" + mode, "look it up")
    assert out.approval is None and len(web_server.hits.queries) == (1 if mode == "off" else 0)
    (gate,) = [r for r in await audit_rows(db, ctx.owner_id) if r["action"] == "search"]
    assert gate["decision"] == decision


def test_spans_count_only_after_normalisation_and_never_the_users_own_words() -> None:
    shown = shown_from([(Source("mail.read"), "Your monthly INVOICE of EUR 42.00 is available.")],
                       ["pay my invoice of EUR 42"])
    assert carried(["monthly   invoice, of"], shown).sources == ("mail.read",)  # case, spacing, punctuation
    assert carried(["invoice of eur"], shown).clean  # the user said it
    assert carried(["a payment is due"], shown).clean
    assert carried(["42.00 is"], shown, earlier=["EUR"]).sources == ("mail.read",)  # across two calls


@pytest.mark.parametrize("same_step", [False, True], ids=["consecutive-steps", "one-answer"])
async def test_a_secret_split_across_two_outbound_calls_is_refused(
    settings: Settings, db: Database, model: ScriptedModel, clock: Clock, ctx: Context, web_server: WebServer,
    same_step: bool,
) -> None:
    """Each half passes DLP alone; the second call is scanned joined with what the turn just sent."""
    turns = await _turns(settings, db, model, clock, web_server)
    first, second = {"query": "AKIA"}, {"query": "IOSFODNN7EXAMPLE"}
    if same_step:
        model.push(calls(("web__search", first), ("web__search", second)), say(""))
    else:
        model.push(call("web__search", first), call("web__search", second), say(""))
    out = await turns.send(ctx, ctx.owner_id + "/secret-" + str(same_step), "look these up")
    assert web_server.hits.queries == ["q=AKIA&format=json"]  # the second half never left
    assert out.outcome != "proposed" and out.approval is None
    rows = [r for r in await audit_rows(db, ctx.owner_id) if r["action"] == "search" and r["stage"] == "gate"]
    assert [(r["decision"], r["reason"]) for r in rows] == [("execute", "mapped"), ("refuse", "dlp_finding")]
    assert "aws_access_key_id" in rows[1]["detail"]["dlp"]


async def test_a_secret_split_across_two_turns_is_refused(
    settings: Settings, db: Database, model: ScriptedModel, clock: Clock, ctx: Context, web_server: WebServer
) -> None:
    """The halves sent in two turns of one thread: once the second turn judged its search alone."""
    turns = await _turns(settings, db, model, clock, web_server)
    thread = ctx.owner_id + "/secret-two-turns"
    model.push(call("web__search", {"query": "AKIA"}), say(""))
    await turns.send(ctx, thread, "look this up")
    model.push(call("web__search", {"query": "IOSFODNN7EXAMPLE"}), say(""))
    out = await turns.send(ctx, thread, "and this")
    assert web_server.hits.queries == ["q=AKIA&format=json"]  # the second half never left
    assert out.approval is None
    rows = [r for r in await audit_rows(db, ctx.owner_id) if r["action"] == "search" and r["stage"] == "gate"]
    assert [(r["decision"], r["reason"]) for r in rows] == [("execute", "mapped"), ("refuse", "dlp_finding")]
    assert "aws_access_key_id" in rows[1]["detail"]["dlp"]


class _LookupArgs(ArgsModel):
    query: SafeText(200)
    note: SafeText(200, min_length=0) = ""


async def _lookup(ctx: ExecContext, args: _LookupArgs) -> ActionResult:
    return ActionResult(tool="partner", action="lookup", kind="read", summary=f"Looked up {args.query}.")


_PARTNER = ToolSpec(
    name="partner", description="A partner's directory.", capability_phrase="look things up at our partner",
    database=True,
    actions=(ActionSpec(name="lookup", description="Look something up in the partner's directory.", args=_LookupArgs,
                        tier="allowlist", effect="read", executor=_lookup, renderer=lambda r: r["summary"],
                        outbound_fields=("query",), usage_examples=("look up acme at the partner",)),),
)


async def test_a_plugin_read_that_marks_an_argument_outbound_is_judged_on_it(
    settings: Settings, db: Database, model: ScriptedModel, clock: Clock, ctx: Context, web_server: WebServer
) -> None:
    """A tool with a database of its own whose ``query`` goes to a partner: that argument is outbound, ``note`` is not."""
    turns = await web_turns(web_settings(settings, web_server), db, model, clock, extra=(_PARTNER,))
    model.push(call("calendar__list", {"range": "today"}), call("partner__lookup", {"query": PRIVATE}))
    out = await turns.send(ctx, ctx.owner_id + "/partner-out", "what's on today? look it up at the partner")
    assert out.approval is not None and (out.approval.tool, out.approval.action) == ("partner", "lookup")
    assert what_runs(out.approval.preview).startswith("⚠ Outbound data")
    model.push(call("calendar__list", {"range": "today"}), call("partner__lookup", {"query": "acme", "note": PRIVATE}),
               say(""))
    kept = await turns.send(ctx, ctx.owner_id + "/partner-note", "what's on today? look up acme at the partner")
    assert kept.approval is None and kept.outcome == "read"  # the note stays in Tollgate


def test_an_outbound_field_must_be_an_argument() -> None:
    with pytest.raises(ValueError, match="outbound field 'url'"):
        ActionSpec(name="lookup", description="x", args=_LookupArgs, tier="allowlist", effect="read",
                   executor=_lookup, renderer=lambda r: r["summary"], outbound_fields=("url",), usage_examples=("x",))
