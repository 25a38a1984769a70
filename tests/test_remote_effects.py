"""Exactly-once for remote effects: an intent before the remote call, its outcome after, reconcile after a crash.

The remote side is a real loopback HTTP service (``tests/remote_service.py``) that counts the
payments it receives; the tool reaches it through ``ExecContext.http`` (the egress gate).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tollgate.graph._env import child_environment
from tollgate.graph.app import open_app
from tollgate.tools.perimeter.config import egress_client
from tollgate.graph.runner import TurnRunner
from tollgate.graph.services import Hooks, Services
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.store.leases import LeaseLost
from tollgate.graph.turn import build_graph
from tollgate.policies.errors import ApprovalInvalid
from tests.conftest import all_rows
from tests.fakes import ScriptedModel, call
from tests.harness import Turns, what_runs
from tests.remote_service import PaymentService, payment_service, payments_tool
from tollgate.tools.builtin import builtin_tools
from tollgate.tools.registry import Registry

_ROOT = Path(__file__).resolve().parent.parent
def _loopback(service: PaymentService) -> dict[str, Any]:
    """Egress settings that reach the payment service on loopback (its host and its port)."""
    port = urlsplit(service.url).port
    return {"egress_allow_hosts": ["127.0.0.1", f"127.0.0.1:{port}"], "egress_allow_networks": ["127.0.0.0/8"],
            "egress_timeout_seconds": 1.0}


@pytest.fixture
def service() -> Iterator[PaymentService]:
    with payment_service() as running:
        yield running


@pytest.fixture
async def pay_turns(services: Services, db: Database, service: PaymentService) -> Turns:
    svc = replace(services, registry=Registry((*builtin_tools(), payments_tool(service.url))),
                  egress=egress_client(services.settings.model_copy(update=_loopback(service))))
    return Turns(TurnRunner(build_graph(svc, checkpointer=await open_checkpointer(db)), svc))


async def _ledger(db: Database, key: str) -> str | None:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT state FROM effects WHERE idem_key = %s", (key,))
        row = await cur.fetchone()
    return row["state"] if row else None


async def _approval(db: Database, approval_id: str) -> tuple[str, str | None]:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT status, error FROM approvals WHERE approval_id = %s", (approval_id,))
        row = await cur.fetchone()
    assert row is not None
    return row["status"], row["error"]


async def _audit(db: Database, owner: str) -> list[tuple[str, str]]:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT decision, reason FROM audit_log WHERE owner_id = %s AND stage = 'execute' "
                                 "ORDER BY seq", (owner,))
        return [(r["decision"], r["reason"]) for r in await cur.fetchall()]


async def _proposed(turns: Turns, model: ScriptedModel, ctx: Context, thread: str) -> str:
    model.push(call("payments__pay", {"to": "sam", "amount_cents": 500}))
    out = await turns.send(ctx, thread, "pay sam 5 euros")
    assert out.approval is not None and what_runs(out.approval.preview) == "Pay sam 500 cents"
    return out.approval.approval_id


async def test_a_remote_write_runs_once_and_passes_its_idempotency_key(
    pay_turns: Turns, model: ScriptedModel, ctx: Context, db: Database, service: PaymentService
) -> None:
    approval_id = await _proposed(pay_turns, model, ctx, ctx.owner_id + "/pay")
    done = await pay_turns.decide(ctx, approval_id, {"type": "approve"})
    assert done.outcome == "executed"
    assert service.payments == [{"to": "sam", "amount_cents": 500, "key": approval_id}]
    assert await _ledger(db, approval_id) == "done" and (await _approval(db, approval_id))[0] == "executed"
    with pytest.raises(ApprovalInvalid):
        await pay_turns.decide(ctx, approval_id, {"type": "approve"})
    assert len(service.payments) == 1


async def test_a_remote_call_refused_by_its_service_ends_failed(
    pay_turns: Turns, model: ScriptedModel, ctx: Context, db: Database, service: PaymentService
) -> None:
    approval_id = await _proposed(pay_turns, model, ctx, ctx.owner_id + "/pay-down")
    service.mode = "fail"
    done = await pay_turns.decide(ctx, approval_id, {"type": "approve"})
    assert done.outcome == "failed" and service.payments == []
    assert await _ledger(db, approval_id) == "failed" and (await _approval(db, approval_id))[0] == "failed"


async def test_a_remote_call_without_an_answer_ends_unknown_and_says_so(
    pay_turns: Turns, model: ScriptedModel, ctx: Context, db: Database, service: PaymentService
) -> None:
    approval_id = await _proposed(pay_turns, model, ctx, ctx.owner_id + "/pay-stall")
    service.mode = "stall"  # longer than the client's 1 s: the payment may have been made
    done = await pay_turns.decide(ctx, approval_id, {"type": "approve"})
    assert done.outcome == "failed" and done.reply is not None and "can't tell whether payments.pay went through" in done.reply
    assert await _ledger(db, approval_id) == "unknown" and (await _approval(db, approval_id))[0] == "failed"
    assert ("failed", "outcome_unknown") in await _audit(db, ctx.owner_id)


def _env(settings: Settings, service: PaymentService) -> dict[str, str]:
    reach = _loopback(service)
    return child_environment(settings, TOLLGATE_THREAD_LEASE_SECONDS="2", TOLLGATE_THREAD_WAIT_SECONDS="30",
                             TOLLGATE_EGRESS_ALLOW_HOSTS=json.dumps(reach["egress_allow_hosts"]),
                             TOLLGATE_EGRESS_ALLOW_NETWORKS=json.dumps(reach["egress_allow_networks"]))


def _proc(settings: Settings, service: PaymentService, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.procs.remote", *args], cwd=_ROOT, env=_env(settings, service),
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("hook", [True, False], ids=["reconciled-done", "no-hook-unknown"])
async def test_a_process_killed_after_the_remote_call_never_repeats_it(
    settings: Settings, db: Database, owner: str, service: PaymentService, hook: bool
) -> None:
    thread = owner + "/pay-crash"
    proposed = _proc(settings, service, "propose", owner, thread, service.url)
    assert proposed.returncode == 0, proposed.stderr[-2000:]
    approval_id = json.loads(proposed.stdout.strip().splitlines()[-1])["approval_id"]
    crashed = _proc(settings, service, "approve-and-crash", owner, thread, service.url, approval_id)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    assert len(service.payments) == 1 and await _ledger(db, approval_id) == "intent"  # paid, not recorded

    restarted = settings.model_copy(update={**_loopback(service), "thread_lease_seconds": 2.0})
    async with open_app(restarted, picker_model=ScriptedModel(steps=[]),
                        tools=[payments_tool(service.url, reconcile=hook)]) as app:
        me = Context(owner_id=owner, timezone="Europe/Paris")
        with pytest.raises(ApprovalInvalid) as refused:  # taking the thread settles the intent first
            await app.runner.decide(me, approval_id, {"type": "approve"})
    assert len(service.payments) == 1  # never paid twice
    status, error = await _approval(db, approval_id)
    reconciled = [r for d, r in await _audit(db, owner) if d == "reconciled"]
    if hook:
        assert "already executed" in refused.value.message and status == "executed"
        assert await _ledger(db, approval_id) == "done" and reconciled == ["remote_done"]
    else:
        assert status == "failed" and error is not None and "could not confirm whether it happened" in error
        assert "could not confirm whether it happened" in refused.value.message  # the owner is told
        assert await _ledger(db, approval_id) == "unknown" and reconciled == ["remote_unknown"]


async def test_a_process_that_stalls_past_its_lease_before_the_remote_call_sends_nothing(
    services: Services, db: Database, service: PaymentService, model: ScriptedModel, ctx: Context
) -> None:
    """The zombie window: the intent is committed, then the process stalls until its lease ran out and
    a successor took the thread (and would settle the intent as not run). Back, it must not send."""
    async def stall_until_taken(key: str) -> None:
        async with all_rows(db) as conn:  # the successor's take: the lease's fence moves on
            await conn.execute("UPDATE thread_leases SET holder = 'successor', fence = fence + 1,"
                               " expires_at = clock_timestamp() + interval '30 seconds'"
                               " WHERE thread_id = (SELECT thread_id FROM approvals WHERE approval_id = %s)", (key,))

    svc = replace(services, registry=Registry((*builtin_tools(), payments_tool(service.url))),
                  egress=egress_client(services.settings.model_copy(update=_loopback(service))),
                  hooks=Hooks(before_remote_call=stall_until_taken))
    turns = Turns(TurnRunner(build_graph(svc, checkpointer=await open_checkpointer(db)), svc))
    approval_id = await _proposed(turns, model, ctx, ctx.owner_id + "/zombie")
    with pytest.raises(LeaseLost):
        await turns.decide(ctx, approval_id, {"type": "approve"})
    assert service.payments == []  # nothing was sent
    assert await _ledger(db, approval_id) == "intent"  # left for the successor to settle
