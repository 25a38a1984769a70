"""Governance: one decision per call from server facts, and exactly one audit record per refusal."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from tollgate.graph.ledger.audit import verify_chain
from tollgate.graph.runner import TurnRunner
from tollgate.graph.services import Services
from tollgate.graph.state import Context
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.turn import build_graph
from tollgate.policies.approval import args_hash
from tollgate.policies.arguments import ArgsModel, SafeText
from tollgate.policies.egress import EgressPolicy
from tollgate.policies.errors import ApprovalInvalid
from tollgate.policies.governance import ActionFacts, GovernancePolicy, govern
from tests.conftest import all_rows
from tests.fakes import ScriptedModel, call, say
from tests.harness import Clock, Turns, what_runs
from tests.perimeter_harness import audit_rows
from tollgate.tools._render import write_result
from tollgate.tools.args import MailSendArgs
from tollgate.tools.builtin import builtin_tools, default_registry
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, Registry, ToolSpec
from tollgate.tools.web import FetchArgs, SearchArgs

AWS_KEY_ID = "AKIA" + "IOSFODNN7EXAMPLE"
STRIPE = "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc"
TIERS = default_registry().tier_map() | {("web", "fetch"): "allowlist", ("web", "search"): "allowlist"}
ENFORCE = GovernancePolicy(egress=EgressPolicy.build(allow_hosts=["news.example"]))
SHADOW = replace(ENFORCE, mode="shadow")
SEND = ActionFacts(MailSendArgs, "write")
SEARCH = ActionFacts(SearchArgs, "read")
FETCH = ActionFacts(FetchArgs, "read")
MAIL = {"to": ["sam@example.com"], "subject": "hi", "body": "see you at 12:30"}


# --- the pure decision -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "violation"),
    [
        pytest.param(MAIL | {"owner_id": "victim"}, "owner_id", id="owner-key"),
        pytest.param(MAIL | {"tenant": "acme"}, "tenant", id="tenant-key"),
        pytest.param(MAIL | {"tier": "allowlist"}, "tier", id="tier-key"),
        pytest.param(MAIL | {"approved": True}, "approved", id="approved-flag"),
        pytest.param({**MAIL, "to": "sam@example.com"}, "to", id="wrong-type"),
        pytest.param({**MAIL, "to": ["Sam <sam@example.com>"]}, "to.0", id="display-name-address"),
        pytest.param(["not", "an", "object"], "(arguments)", id="not-an-object"),
        pytest.param({**MAIL, "body": float("nan")}, "(arguments)", id="nan"),
    ],
)
def test_closed_schemas_refuse_what_the_model_adds(args: Any, violation: str) -> None:
    decision = govern("mail", "send", args, SEND, TIERS, ENFORCE)
    assert decision.verdict == "clarify" and decision.code == "invalid_args"
    assert any(v.startswith(violation) for v in decision.violations), decision.violations


@pytest.mark.parametrize(
    ("tool", "action", "tier_map", "reason"),
    [
        pytest.param("mail", "send", {("mail", "send"): "mustlist"}, "operator_only", id="mustlist"),
        pytest.param("mail", "send", {("mail", "send"): "blocklist"}, "blocklisted", id="blocklist"),
        pytest.param("mail", "send", {}, "unclassified", id="unclassified"),
        pytest.param("mail", "wipe", {("mail", "wipe"): "allowlist"}, "hard_delete", id="declared-destructive"),
    ],
)
def test_the_tier_comes_from_the_server_map_only(tool: str, action: str, tier_map: Any, reason: str) -> None:
    # Whatever the arguments say, the map and the declared effect decide; nothing is decoded
    # for a refused tier.
    facts = ActionFacts(MailSendArgs, "destructive") if action == "wipe" else SEND
    decision = govern(tool, action, MAIL | {"tier": "allowlist"}, facts, tier_map, ENFORCE)
    assert (decision.verdict, decision.reason, decision.code) == ("refuse", reason, "permission_denied")


def test_unknown_actions_are_refused() -> None:
    decision = govern("mail", "send", MAIL, None, TIERS, ENFORCE)
    assert (decision.verdict, decision.reason) == ("refuse", "unknown_action")


@pytest.mark.parametrize(
    ("policy", "facts", "tool", "action", "args", "verdict", "reason", "shadow"),
    [
        pytest.param(ENFORCE, SEND, "mail", "send", MAIL, "propose", "mapped", (), id="clean-write-proposes"),
        pytest.param(ENFORCE, SEND, "mail", "send", MAIL | {"body": f"key {AWS_KEY_ID}"}, "propose", "dlp_finding", (), id="write-with-secret-proposes-with-warning"),
        pytest.param(ENFORCE, SEND, "mail", "send", {**MAIL, "to": [f"{STRIPE[:20]}@evil.example"]}, "propose", "mapped", (), id="recipient-without-full-key"),
        pytest.param(ENFORCE, SEARCH, "web", "search", {"query": "pg locks"}, "execute", "mapped", (), id="clean-read-runs"),
        pytest.param(ENFORCE, SEARCH, "web", "search", {"query": f"who owns {STRIPE}"}, "refuse", "dlp_finding", (), id="read-with-secret-refused"),
        pytest.param(SHADOW, SEARCH, "web", "search", {"query": f"who owns {STRIPE}"}, "execute", "mapped", ("dlp_block",), id="shadow-read-recorded-only"),
        pytest.param(SHADOW, SEND, "mail", "send", MAIL | {"body": AWS_KEY_ID}, "propose", "mapped", ("dlp_approval",), id="shadow-write-recorded-only"),
        pytest.param(ENFORCE, FETCH, "web", "fetch", {"url": "https://news.example/a"}, "execute", "mapped", (), id="allowlisted-url"),
        pytest.param(ENFORCE, FETCH, "web", "fetch", {"url": "https://evil.example/a"}, "refuse", "not_allowlisted", (), id="unlisted-url"),
        pytest.param(SHADOW, FETCH, "web", "fetch", {"url": "http://169.254.169.254/"}, "refuse", "metadata_endpoint", (), id="shadow-never-shadows-ssrf"),
        pytest.param(ENFORCE, SEARCH, "web", "search", {"query": "x" * 150}, "execute", "mapped", (), id="long-but-bounded"),
    ],
)
def test_decisions(
    policy: GovernancePolicy, facts: ActionFacts, tool: str, action: str, args: dict[str, Any],
    verdict: str, reason: str, shadow: tuple[str, ...],
) -> None:
    decision = govern(tool, action, args, facts, TIERS, policy)
    assert (decision.verdict, decision.reason, decision.shadow) == (verdict, reason, shadow)
    if reason == "dlp_finding" and verdict == "propose":
        assert "AWS access key id" in decision.warning and "(in body)" in decision.warning
    detail = str(decision.audit_detail())
    assert AWS_KEY_ID not in detail and STRIPE not in detail  # the audit sees kinds, never values


def test_dlp_failure_fails_closed() -> None:
    tiny = replace(ENFORCE, dlp=replace(ENFORCE.dlp, max_chars=10))
    decision = govern("web", "search", {"query": "an ordinary but long query"}, SEARCH, TIERS, tiny)
    assert (decision.verdict, decision.reason, decision.dlp) == ("refuse", "dlp_finding", ("oversize",))


def test_audit_detail_holds_kinds_not_values() -> None:
    decision = govern("mail", "send", MAIL | {"body": f"{AWS_KEY_ID} and {STRIPE}"}, SEND, TIERS, ENFORCE)
    detail = decision.audit_detail()
    assert detail == {"tier": "confirmation", "dlp": ["aws_access_key_id", "stripe_live_key"], "dlp_fields": ["body"]}


# --- on the real graph: one record per refusal ---------------------------------------------------


class _NoteArgs(ArgsModel):
    text: SafeText(300)


async def _jot(ctx: ExecContext, args: _NoteArgs) -> ActionResult:
    return write_result("scratch", "jot", {"chars": len(args.text)}, 1, "Noted.")


async def _never(ctx: ExecContext, args: Any) -> ActionResult:
    raise AssertionError("a refused action must never execute")


_NOTES = ToolSpec(
    name="scratch",
    description="Scratch notes.",
    capability_phrase="jot notes",
    actions=(
        ActionSpec("jot", "Jot a note.", _NoteArgs, "allowlist", _jot, lambda r: r["summary"], ("jot this",),
                   effect="write", idempotent=True),
        ActionSpec("export", "Export notes to the operator.", _NoteArgs, "mustlist", _never, lambda r: "", ("export",)),
        ActionSpec("shred", "Shred notes.", _NoteArgs, "blocklist", _never, lambda r: "", ("shred",)),
    ),
)


@pytest.fixture
async def gov_turns(services: Services, db: Database) -> Turns:
    """The real graph with the built-in tools plus a notes tool (an approval-free write and refused tiers)."""
    governed = replace(services, registry=Registry((*builtin_tools(), _NOTES)))
    return Turns(TurnRunner(build_graph(governed, checkpointer=await open_checkpointer(db)), governed))


_REFUSALS = ("refuse", "clarify", "invalid", "expired", "failed")


async def _refusal_records(db: Database, owner: str) -> list[tuple[str, str, str, str]]:
    return [
        (r["stage"], r["decision"], r["reason"], r["code"])
        for r in await audit_rows(db, owner)
        if r["decision"] in _REFUSALS
    ]


async def _list_calendar(turns: Turns, model: ScriptedModel, ctx: Context, thread: str) -> None:
    model.push(call("calendar__list", {"range": "today"}), say(""))
    await turns.send(ctx, thread, "calendar today")


Scenario = Callable[[Turns, ScriptedModel, Context, str, Clock], Awaitable[None]]


async def _mustlist(turns: Turns, model: ScriptedModel, ctx: Context, thread: str, clock: Clock) -> None:
    model.push(call("scratch__export", {"text": "all"}))
    await turns.send(ctx, thread, "export my notes")


async def _blocklist(turns: Turns, model: ScriptedModel, ctx: Context, thread: str, clock: Clock) -> None:
    model.push(call("scratch__shred", {"text": "all"}))
    await turns.send(ctx, thread, "shred my notes")


async def _invented_function(turns: Turns, model: ScriptedModel, ctx: Context, thread: str, clock: Clock) -> None:
    model.push(call("calendar__teleport", {}), call("calendar__teleport", {}))
    await turns.send(ctx, thread, "teleport")


async def _owner_claim(turns: Turns, model: ScriptedModel, ctx: Context, thread: str, clock: Clock) -> None:
    model.push(*[call("calendar__list", {"range": "today", "owner_id": "victim"})] * 2)
    await turns.send(ctx, thread, "victim's calendar")


async def _invented_id(turns: Turns, model: ScriptedModel, ctx: Context, thread: str, clock: Clock) -> None:
    await _list_calendar(turns, model, ctx, thread)
    model.push(call("calendar__cancel_event", {"event_id": "evt_invented01"}))
    await turns.send(ctx, thread, "cancel it")


async def _secret_read(turns: Turns, model: ScriptedModel, ctx: Context, thread: str, clock: Clock) -> None:
    model.push(call("mail__list", {"from_contains": AWS_KEY_ID}))
    await turns.send(ctx, thread, "mail from that key")


async def _edit_adds_secret(turns: Turns, model: ScriptedModel, ctx: Context, thread: str, clock: Clock) -> None:
    model.push(call("mail__send", MAIL))
    out = await turns.send(ctx, thread, "email sam")
    assert out.approval is not None
    edit = {"type": "edit", "run": True, "edited_action": {"name": "mail__send", "args": MAIL | {"body": f"key {AWS_KEY_ID}"}}}
    done = await turns.decide(ctx, out.approval.approval_id, edit)
    assert done.outcome == "refused"


async def _edit_changes_action(turns: Turns, model: ScriptedModel, ctx: Context, thread: str, clock: Clock) -> None:
    model.push(call("mail__send", MAIL))
    out = await turns.send(ctx, thread, "email sam")
    assert out.approval is not None
    edit = {"type": "edit", "edited_action": {"name": "calendar__create", "args": {}}}
    with pytest.raises(ApprovalInvalid):  # refused before the graph resumes: the approval stays pending
        await turns.decide(ctx, out.approval.approval_id, edit)


async def _expired(turns: Turns, model: ScriptedModel, ctx: Context, thread: str, clock: Clock) -> None:
    model.push(call("mail__send", MAIL))
    out = await turns.send(ctx, thread, "email sam")
    assert out.approval is not None
    clock.advance(days=4)
    await turns.decide(ctx, out.approval.approval_id, {"type": "approve"})


async def _tampered_token(turns: Turns, model: ScriptedModel, ctx: Context, thread: str, clock: Clock) -> None:
    model.push(call("mail__send", MAIL))
    out = await turns.send(ctx, thread, "email sam")
    assert out.approval is not None
    with pytest.raises(ApprovalInvalid):
        await turns.runner.resume(ctx, thread, {"token": "v1.forged.token", "decisions": [{"type": "approve"}]})


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        pytest.param(_mustlist, [("gate", "refuse", "operator_only", "permission_denied")], id="mustlist"),
        pytest.param(_blocklist, [("gate", "refuse", "blocklisted", "permission_denied")], id="blocklist"),
        pytest.param(_invented_function, [("picker", "clarify", "invalid_call", "invalid_args")], id="invented-function"),
        pytest.param(_owner_claim, [("picker", "clarify", "invalid_call", "invalid_args")], id="owner-claim"),
        pytest.param(_invented_id, [("ids", "clarify", "not_returned", "off_list_id")], id="invented-id"),
        pytest.param(_secret_read, [("gate", "refuse", "dlp_finding", "egress_denied")], id="secret-in-a-read"),
        pytest.param(_edit_adds_secret, [("execute", "refuse", "edit_dlp_finding", "egress_denied")], id="edit-adds-secret"),
        pytest.param(_edit_changes_action, [("runner", "invalid", "resume_refused", "approval_invalid")], id="edit-changes-action"),
        pytest.param(_expired, [("approval", "expired", "expired", "approval_expired")], id="expired-approval"),
        pytest.param(_tampered_token, [("runner", "invalid", "resume_refused", "approval_invalid")], id="tampered-token"),
    ],
)
async def test_every_refusal_has_exactly_one_record(
    gov_turns: Turns, model: ScriptedModel, ctx: Context, db: Database, clock: Clock,
    scenario: Scenario, expected: list[tuple[str, str, str, str]],
) -> None:
    await scenario(gov_turns, model, ctx, ctx.owner_id + "/audit", clock)
    assert await _refusal_records(db, ctx.owner_id) == expected
    for row in await audit_rows(db, ctx.owner_id):
        assert row["owner_id"] == ctx.owner_id  # identity from the run context, never the model
        assert AWS_KEY_ID not in row["body"] and "victim" not in row["body"]
    async with all_rows(db) as conn:
        assert (await verify_chain(conn)).ok


async def test_every_decision_is_recorded_once(gov_turns: Turns, model: ScriptedModel, ctx: Context, db: Database) -> None:
    thread = ctx.owner_id + "/all"
    await _list_calendar(gov_turns, model, ctx, thread)
    model.push(call("calendar__cancel_event", {"event_id": "#2"}))
    out = await gov_turns.send(ctx, thread, "cancel the 2nd")
    assert out.approval is not None
    await gov_turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    rows = await audit_rows(db, ctx.owner_id)
    assert [(r["stage"], r["decision"], r["tool"], r["action"]) for r in rows] == [
        ("gate", "execute", "calendar", "list"),
        ("gate", "propose", "calendar", "cancel_event"),
        ("approval", "approve", "calendar", "cancel_event"),
    ]
    # The approval record names the exact (bound) arguments that ran.
    assert rows[2]["args_hash"] == args_hash(out.approval.args) != rows[1]["args_hash"]


async def test_a_secret_in_mail_becomes_a_warned_approval_whose_preview_is_what_runs(
    gov_turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    args = {"to": ["sam@example.com"], "subject": "keys", "body": f"here it is: {AWS_KEY_ID}"}
    model.push(call("mail__send", args))
    out = await gov_turns.send(ctx, ctx.owner_id + "/warn", "send sam the key")
    assert out.approval is not None
    assert what_runs(out.approval.preview).startswith("⚠ Data-loss warning: this contains what looks like an AWS access key id (in body).")
    assert out.approval.args == args
    done = await gov_turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed"
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT to_addrs, subject, body FROM mail_outbox WHERE owner_id = %s", (ctx.owner_id,))
        sent = await cur.fetchall()
    assert [(r["to_addrs"], r["subject"], r["body"]) for r in sent] == [(args["to"], args["subject"], args["body"])]
    [gate] = [r for r in await audit_rows(db, ctx.owner_id) if r["stage"] == "gate"]
    assert (gate["decision"], gate["reason"], gate["detail"]["dlp"]) == ("propose", "dlp_finding", ["aws_access_key_id"])


async def test_an_approval_free_write_with_a_finding_needs_approval(
    gov_turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    model.push(call("scratch__jot", {"text": "remember milk"}), say(""), call("scratch__jot", {"text": "card 4111 1111 1111 1111"}))
    clean = await gov_turns.send(ctx, ctx.owner_id + "/jot", "jot milk")
    assert clean.outcome == "executed" and clean.approval is None
    flagged = await gov_turns.send(ctx, ctx.owner_id + "/jot", "jot my card")
    assert flagged.outcome == "proposed" and flagged.approval is not None
    assert "payment card number (in text)" in flagged.approval.preview
    assert "Jot a note.\ntext: card 4111 1111 1111 1111" in flagged.approval.preview
    done = await gov_turns.decide(ctx, flagged.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed"


async def test_shadow_mode_records_without_acting(services: Services, db: Database, model: ScriptedModel, ctx: Context) -> None:
    shadow = replace(services, settings=services.settings.model_copy(update={"governance_mode": "shadow"}),
                     registry=Registry((*builtin_tools(), _NOTES)))
    turns = Turns(TurnRunner(build_graph(shadow, checkpointer=await open_checkpointer(db)), shadow))
    model.push(call("scratch__jot", {"text": f"key {AWS_KEY_ID}"}), say(""), call("scratch__export", {"text": "x"}))
    out = await turns.send(ctx, ctx.owner_id + "/shadow", "jot the key")
    assert out.outcome == "executed"  # shadow: DLP only recorded
    refused = await turns.send(ctx, ctx.owner_id + "/shadow", "export")
    assert refused.outcome == "refused"  # tiers are enforced in every mode
    rows = [(r["decision"], r["mode"], r["detail"].get("shadow")) for r in await audit_rows(db, ctx.owner_id)]
    assert rows == [("execute", "shadow", ["dlp_approval"]), ("refuse", "shadow", None)]



@pytest.mark.parametrize(
    ("scenario", "named"),
    [
        pytest.param(_owner_claim, ("calendar", "list"), id="schema-refusal"),
        pytest.param(_invented_id, ("calendar", "cancel_event"), id="id-refusal"),
        pytest.param(_edit_changes_action, ("mail", "send"), id="edit-of-another-action"),
        pytest.param(_tampered_token, ("mail", "send"), id="forged-token"),
    ],
)
async def test_every_refusal_names_its_tool_action_and_args_hash(
    gov_turns: Turns, model: ScriptedModel, ctx: Context, db: Database, clock: Clock,
    scenario: Scenario, named: tuple[str, str],
) -> None:
    await scenario(gov_turns, model, ctx, ctx.owner_id + "/named", clock)
    refusals = [r for r in await audit_rows(db, ctx.owner_id) if r["decision"] in _REFUSALS]
    assert [(r["tool"], r["action"]) for r in refusals] == [named]
    assert len(refusals[0]["args_hash"]) == 64


async def test_a_call_to_an_unknown_function_is_recorded_as_such(
    gov_turns: Turns, model: ScriptedModel, ctx: Context, db: Database, clock: Clock
) -> None:
    await _invented_function(gov_turns, model, ctx, ctx.owner_id + "/unknown", clock)
    (refusal,) = [r for r in await audit_rows(db, ctx.owner_id) if r["decision"] in _REFUSALS]
    assert (refusal["tool"], refusal["detail"]) == ("", {"unknown_function": True}) and len(refusal["args_hash"]) == 64


async def test_a_secret_split_across_two_arguments_still_warns_the_approver(
    gov_turns: Turns, model: ScriptedModel, ctx: Context
) -> None:
    args = {"to": ["sam@example.com"], "subject": AWS_KEY_ID[:4], "body": AWS_KEY_ID[4:]}
    model.push(call("mail__send", args))
    out = await gov_turns.send(ctx, ctx.owner_id + "/split", "send sam the key in two parts")
    assert out.approval is not None
    assert what_runs(out.approval.preview).startswith("⚠ Data-loss warning: this contains what looks like an AWS access key id")
