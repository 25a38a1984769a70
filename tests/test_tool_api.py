"""The public tool API covers what a third-party suite needs, each through the compiled graph:
typed errors and URL fields from ``tools``, integer ids, ids the owner typed, destructive
actions a deployment opts in to approve, results cut with a sign, per-owner services on the
context, and reads that change state."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from tollgate import tools
from tollgate.graph.services import Services
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.turn import build_graph
from tollgate.graph.runner import TurnRunner
from tests.fakes import ScriptedModel, call, say
from tests.harness import Clock, Turns
from tests.perimeter_harness import audit_rows
from tollgate.tools import (
    ActionResult, ActionSpec, ArgsModel, ExecContext, IdKind, NotFound, ResultRow, SafeText, ToolSpec, Transient,
    template_preview,
)
from tollgate.tools.builtin import builtin_tools
from tollgate.tools.registry import Registry


def test_the_typed_errors_and_url_fields_are_importable_from_tools() -> None:
    for name in ("NotFound", "InvalidArgs", "PermissionDenied", "Transient", "Unavailable", "EgressDenied",
                 "OutcomeUnknown", "TollgateError", "EgressUrl", "UrlField"):
        assert name in tools.__all__ and getattr(tools, name) is not None
    assert issubclass(tools.NotFound, tools.TollgateError)


class _Orders(ArgsModel):
    """No arguments."""


class _Cancel(ArgsModel):
    """One order."""

    order_id: Annotated[int, Field(ge=1, le=10**9)]


class _Close(ArgsModel):
    """One ticket."""

    ticket_id: SafeText(20)


class _Shred(ArgsModel):
    """One document."""

    name: SafeText(40)


class _Page(ArgsModel):
    """Nothing."""


class _Suite:
    """A plug-in suite with its per-owner state behind ``service_for`` (no module globals)."""

    def __init__(self) -> None:
        self.by_owner: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []

    def service(self, owner_id: str) -> dict[str, Any]:
        return self.by_owner.setdefault(owner_id, {"cancelled": [], "closed": [], "shredded": [], "unread": 2})

    def tool(self) -> ToolSpec:
        async def orders(ctx: ExecContext, args: _Orders) -> ActionResult:
            rows = [ResultRow(id=1042, label="order 1042: a kettle"), ResultRow(id=1043, label="order 1043: tea")]  # type: ignore[typeddict-item]
            return ActionResult(tool="shop", action="orders", kind="list", summary="2 orders.", rows=rows, list_kind="order")

        async def cancel(ctx: ExecContext, args: _Cancel) -> ActionResult:
            assert isinstance(args.order_id, int)
            ctx.service["cancelled"].append(args.order_id)
            return ActionResult(tool="shop", action="cancel", kind="write", changed=1, summary=f"Cancelled {args.order_id}.")

        async def close(ctx: ExecContext, args: _Close) -> ActionResult:
            ctx.service["closed"].append(args.ticket_id)
            return ActionResult(tool="shop", action="close", kind="write", changed=1, summary=f"Closed {args.ticket_id}.")

        async def shred(ctx: ExecContext, args: _Shred) -> ActionResult:
            ctx.service["shredded"].append(args.name)
            return ActionResult(tool="shop", action="shred", kind="write", changed=1, summary=f"Shredded {args.name}.")

        async def page(ctx: ExecContext, args: _Page) -> ActionResult:
            return ActionResult(tool="shop", action="page", kind="item", summary="The page.", item={"text": "x" * 25_000})

        async def unread(ctx: ExecContext, args: _Page) -> ActionResult:
            self.calls.append("unread")
            if len(self.calls) == 1:
                raise Transient("shop inbox")
            ctx.service["unread"] = 0
            return ActionResult(tool="shop", action="unread", kind="item", summary="2 unread, now read.")

        render = lambda r: r["summary"]  # noqa: E731
        return ToolSpec(
            name="shop", description="A shop.", capability_phrase="manage your orders", service_for=self.service,
            id_kinds=(IdKind("order", r"[0-9]{1,9}"), IdKind("ticket", r"T-[0-9]{5}", owner_typed=True)),
            actions=(
                ActionSpec("orders", "List orders.", _Orders, "allowlist", orders, render, ("my orders",)),
                ActionSpec("cancel", "Cancel an order.", _Cancel, "confirmation", cancel, render, ("cancel order 1042",),
                           id_fields={"order_id": "order"}, effect="write", preview=template_preview("Cancel {order_id}")),
                ActionSpec("close", "Close a ticket.", _Close, "confirmation", close, render, ("close ticket T-12345",),
                           id_fields={"ticket_id": "ticket"}, effect="write", preview=template_preview("Close {ticket_id}")),
                ActionSpec("shred", "Shred a document for good.", _Shred, "confirmation", shred, render, ("shred it",),
                           effect="destructive", preview=template_preview("Shred {name}")),
                ActionSpec("page", "Read a long page.", _Page, "allowlist", page, render, ("the long page",)),
                ActionSpec("unread", "Fetch unread mail (marks it read).", _Page, "allowlist", unread, render,
                           ("fetch my unread mail",), changes_state=True),
            ),
        )


async def _turns(settings: Settings, db: Database, model: ScriptedModel, clock: Clock, suite: _Suite,
                 **changes: Any) -> Turns:
    values = settings.model_copy(update=changes)
    registry = Registry((*builtin_tools(), suite.tool()), values.model_dump())
    services = Services(settings=values, db=db, registry=registry, picker_model=model, clock=clock)
    return Turns(TurnRunner(build_graph(services, checkpointer=await open_checkpointer(db)), services))


async def test_integer_ids_bind_as_integers_and_only_when_returned(
    settings: Settings, db: Database, model: ScriptedModel, clock: Clock, ctx: Context
) -> None:
    suite = _Suite()
    turns = await _turns(settings, db, model, clock, suite)
    thread = ctx.owner_id + "/int"
    model.push(call("shop__cancel", {"order_id": 1042}))
    out = await turns.send(ctx, thread, "cancel order 1042")
    assert out.outcome == "clarify" and out.approval is None  # no list yet: nothing binds
    model.push(call("shop__orders", {}), call("shop__cancel", {"order_id": 1042}))
    out = await turns.send(ctx, thread, "my orders, then cancel the kettle")
    assert out.approval is not None and out.approval.actions[0].args == {"order_id": 1042}
    done = await turns.runner.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed" and suite.service(ctx.owner_id)["cancelled"] == [1042]


async def test_an_id_the_owner_typed_binds_when_its_kind_confirms_it_and_one_the_model_wrote_does_not(
    settings: Settings, db: Database, model: ScriptedModel, clock: Clock, ctx: Context
) -> None:
    suite = _Suite()
    turns = await _turns(settings, db, model, clock, suite)
    model.push(call("shop__close", {"ticket_id": "T-12345"}))
    out = await turns.send(ctx, ctx.owner_id + "/typed", "close ticket T-12345.")
    assert out.approval is not None and out.approval.actions[0].args == {"ticket_id": "T-12345"}
    model.push(call("shop__close", {"ticket_id": "T-99999"}))
    out = await turns.send(ctx, ctx.owner_id + "/made-up", "close my ticket")
    assert out.approval is None and out.outcome == "clarify"


async def test_a_destructive_action_is_refused_unless_the_deployment_opts_in_and_then_it_needs_approval(
    settings: Settings, db: Database, model: ScriptedModel, clock: Clock, ctx: Context
) -> None:
    suite = _Suite()
    turns = await _turns(settings, db, model, clock, suite)
    model.push(call("shop__shred", {"name": "old lease"}), say(""))
    out = await turns.send(ctx, ctx.owner_id + "/shred-default", "shred the old lease")
    assert out.approval is None and suite.service(ctx.owner_id)["shredded"] == []
    assert any(e["data"].get("code") == "permission_denied" for e in out.events)
    opted = await _turns(settings, db, model, clock, suite, destructive_approvable=["shop.shred"])
    model.push(call("shop__shred", {"name": "old lease"}))
    out = await opted.send(ctx, ctx.owner_id + "/shred-opted", "shred the old lease")
    assert out.approval is not None
    assert [w["code"] for w in out.approval.actions[0].warnings] == ["destructive"]
    done = await opted.runner.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed" and suite.service(ctx.owner_id)["shredded"] == ["old lease"]


async def test_a_result_cut_to_fit_says_so_to_the_model(
    settings: Settings, db: Database, model: ScriptedModel, clock: Clock, ctx: Context
) -> None:
    suite = _Suite()
    turns = await _turns(settings, db, model, clock, suite)
    model.push(call("shop__page", {}), say(""))
    await turns.send(ctx, ctx.owner_id + "/cut", "the long page")
    shown = [m for m in model.prompts[-1] if getattr(m, "type", "") == "tool"]
    assert "[cut here: 5,000 more characters not kept]" in str(shown[-1].content)


async def test_a_read_that_changes_state_is_never_retried_and_is_audited(
    settings: Settings, db: Database, model: ScriptedModel, clock: Clock, ctx: Context
) -> None:
    suite = _Suite()
    turns = await _turns(settings, db, model, clock, suite)
    model.push(call("shop__unread", {}), say(""))
    await turns.send(ctx, ctx.owner_id + "/unread", "fetch my unread mail")
    assert suite.calls == ["unread"]  # the transient failure was not retried
    model.push(call("shop__unread", {}), say(""))
    await turns.send(ctx, ctx.owner_id + "/unread", "fetch my unread mail")
    assert suite.service(ctx.owner_id)["unread"] == 0
    assert [r["reason"] for r in await audit_rows(db, ctx.owner_id) if r["action"] == "unread"][-1] == "read_changed_state"


def test_changes_state_is_for_reads() -> None:
    import pytest

    with pytest.raises(ValueError, match="changes_state describes a read"):
        ActionSpec("x", "X.", _Page, "confirmation", lambda c, a: None, lambda r: "", ("x",), effect="write",  # type: ignore[arg-type, return-value]
                   preview=template_preview("x"), changes_state=True)
    assert NotFound("order", "1").code == "not_found"


def test_a_misspelt_tier_is_refused_when_the_action_is_declared() -> None:
    """A tier the gate does not know would leave the action refused on every call as unclassified;
    the declaration names the tiers instead."""
    import pytest

    with pytest.raises(ValueError, match="tier must be one of allowlist, confirmation, mustlist, blocklist, not 'auto'"):
        ActionSpec("x", "X.", _Page, "auto", lambda c, a: None, lambda r: "", ("x",))  # type: ignore[arg-type, return-value]
