"""The calendar tool on an owner's CalDAV account, through the real compiled graph and a real Radicale.

The owner's backend is a setting (``calendar_backend_owners``); their account is three encrypted
credentials of the calendar tool. The offline picker drives the turns, so the whole chat flow
runs: list, "cancel the 2nd one", approve, and the server's state changes once. A process killed
after the server stored a change, before Tollgate recorded it, has it recorded as done, not redone.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest

from tollgate.graph.app import open_app
from tollgate.graph.ledger.approval_contract import check_approvals
from tollgate.tools.perimeter.config import egress_client
from tollgate.graph.perimeter.credentials import CredentialStore, credentials_cipher
from tollgate.graph.runner import TurnRunner
from tollgate.graph.services import Services
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.store.owner_scope import owner_transaction
from tollgate.graph.turn import build_graph
from tollgate.nodes.id_validation import bind_plan_ids
from tollgate.nodes.offline import OfflinePicker
from tollgate.policies.errors import ApprovalInvalid
from tests.caldav_server import RadicaleServer, radicale
from tests.children import run_connector_step
from tests.conftest import NOW, all_rows
from tests.fakes import ScriptedModel
from tests.flaky_proxy import flaky_relay
from tests.harness import Clock, Turns
from tollgate.tools.builtin import default_registry
from tollgate.tools.connectors.caldav import CalDavAccount, CalDavCalendar, RemoteEvent
from tollgate.tools.connectors.caldav_calendar import ACCOUNT_NAMES, CALDAV_EVENT, CalDavEvents
from tollgate.tools.connectors.triggers import NotWatched
from tollgate.tools.demo import seed_demo
from tollgate.tools.triggers import TriggerCreateArgs

PARIS = ZoneInfo("Europe/Paris")
_PASSWORD = "calendar-pass-9"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RadicaleServer]:
    with radicale(tmp_path_factory.mktemp("radicale-tool"), {"alice": _PASSWORD}) as running:
        yield running


def _reach(settings: Settings, owner: str) -> Settings:
    return settings.model_copy(update={"calendar_backend_owners": {owner: "caldav"},
                                       "egress_allow_networks": ["127.0.0.0/8"], "connector_plaintext_hosts": ["127.0.0.1"]})


async def _connect(cfg: Settings, db: Database, owner: str, url: str) -> None:
    store = CredentialStore(db.pool, credentials_cipher(cfg, cfg.approval_key()))
    for name, value in zip(ACCOUNT_NAMES, (url, "alice", _PASSWORD), strict=True):
        await store.set(owner, "calendar", name, value)


@dataclass
class Rig:
    turns: Turns
    ctx: Context
    remote: CalDavCalendar
    """The owner's calendar as another client sees it (for checks and changes behind the tool's back)."""
    thread: str


@pytest.fixture
async def rig(settings: Settings, db: Database, owner: str, server: RadicaleServer) -> AsyncIterator[Rig]:
    cfg = _reach(settings, owner)
    url = server.calendar("alice", "cal-" + owner[-8:])
    await _connect(cfg, db, owner, url)
    remote = CalDavCalendar(egress_client(cfg), CalDavAccount(url, "alice", _PASSWORD, frozenset({"127.0.0.1"})), PARIS)
    for key, title, hours in (("seed-1", "Standup", 26), ("seed-2", "Dentist", 29)):
        start = NOW + timedelta(hours=hours)
        await remote.create(key, title=title, starts_at=start, ends_at=start + timedelta(hours=1), now=NOW)
    services = Services(settings=cfg, db=db, registry=default_registry(cfg), picker_model=OfflinePicker(), clock=Clock(NOW))
    turns = Turns(TurnRunner(build_graph(services, checkpointer=await open_checkpointer(db)), services))
    yield Rig(turns, Context(owner_id=owner, timezone="Europe/Paris"), remote, f"{owner}/caldav")


async def _events(rig: Rig) -> list[RemoteEvent]:
    return await rig.remote.list(NOW - timedelta(days=1), None)


async def test_list_cancel_the_2nd_one_approve_and_the_server_changes_once(rig: Rig) -> None:
    listed = await rig.turns.send(rig.ctx, rig.thread, "what's on my calendar this week?")
    assert listed.outcome == "read" and listed.reply is not None
    assert listed.reply.index("Standup") < listed.reply.index("Dentist")  # the server's events, in order
    proposed = await rig.turns.send(rig.ctx, rig.thread, "cancel the 2nd one")
    assert proposed.approval is not None and "Dentist" in proposed.approval.preview
    done = await rig.turns.decide(rig.ctx, proposed.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed", done.reply
    assert [(e.title, e.status) for e in await _events(rig)] == [("Standup", "CONFIRMED"), ("Dentist", "CANCELLED")]
    await rig.turns.check_approvals(rig.thread)


async def test_the_servers_ids_are_their_own_kind_and_bind_only_for_their_owner(rig: Rig) -> None:
    """A CalDAV owner's events are ``caldav_event`` ids: listed, read and written as that kind, and
    bound only for that owner (another owner's calendar calls bind ``calendar`` ids)."""
    await rig.turns.send(rig.ctx, rig.thread, "what's on my calendar this week?")
    opened = await rig.turns.send(rig.ctx, rig.thread, "show me the 2nd one")
    assert opened.outcome == "read" and opened.reply is not None and "Dentist" in opened.reply
    state = (await rig.turns.runner.graph.aget_state({"configurable": {"thread_id": rig.thread}})).values
    listed = [row["id"] for row in state["recent"]["caldav_event"]["rows"]]
    assert "calendar" not in state["recent"] and len(listed) == 2 and all(CALDAV_EVENT.accepts(i) for i in listed)
    assert listed[1] in state["known"]["caldav_event"]  # the event read is of the same kind

    cancel = rig.turns.runner.services.registry.action("calendar", "cancel_event")
    assert cancel is not None and cancel.id_fields_of(rig.ctx.owner_id) == {"event_id": "caldav_event"}
    _, refused, _ = bind_plan_ids(rig.turns.runner.services.registry, cancel, {"event_id": listed[0]}, state,
                                  rig.ctx.owner_id + "_b")
    assert cancel.id_fields_of(rig.ctx.owner_id + "_b") == {"event_id": "calendar"}
    assert refused is not None and refused.refusal == "no_list"  # that owner was shown no calendar list here


async def test_a_trigger_rule_on_events_from_the_owners_server_is_refused(rig: Rig) -> None:
    """The trigger evaluator watches Tollgate's own calendar: for a CalDAV owner an event rule is
    refused at its preview and at its executor; a mail rule (their mail is Tollgate's) is not."""
    create = rig.turns.runner.services.registry.action("triggers", "create")
    assert create is not None and create.preview is not None
    ctx = rig.turns.runner.services.exec_context(rig.ctx.owner_id, "Europe/Paris", "triggers", None, None)
    on_events = TriggerCreateArgs.model_validate(
        {"match": {"kind": "event", "title_contains": "Standup", "lead_minutes": 30}, "instruction": "x"})
    for step in (create.preview, create.executor):
        with pytest.raises(NotWatched, match="calendar events kept in Tollgate itself"):
            await step(ctx, on_events)
    on_mail = TriggerCreateArgs.model_validate({"match": {"kind": "mail", "sender": "sam@example.com"},
                                                "instruction": "x"})
    assert "sam@example.com" in await create.preview(ctx, on_mail)


async def test_events_are_found_again_by_name_or_by_their_hashed_address(rig: Rig) -> None:
    """Tollgate's events (named by a UUID) are read back with one GET; one another client stored
    under a name that does not fit an id is found by listing. Both can be cancelled."""
    ics = (b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//phone//EN\r\nBEGIN:VEVENT\r\nUID:phone-1\r\n"
           b"DTSTAMP:20261130T090000Z\r\nDTSTART:20261202T150000Z\r\nDTEND:20261202T160000Z\r\n"
           b"SUMMARY:Haircut\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n")
    put = httpx.put(rig.remote.url + "from_my_phone%20(1).ics", content=ics, auth=("alice", _PASSWORD), timeout=10,
                    headers={"Content-Type": "text/calendar"})
    assert put.status_code in (201, 204), put.text
    listed = await rig.turns.send(rig.ctx, rig.thread, "what's on my calendar this week?")
    assert listed.reply is not None and "Haircut" in listed.reply
    ctx = rig.turns.runner.services.exec_context(rig.ctx.owner_id, "Europe/Paris", "calendar", None, None)
    ids = {r["title"]: r["id"] for r in await CalDavEvents(rig.remote).window(ctx, NOW, None, None, 10)}
    assert ids["Haircut"].startswith("cdh_") and ids["Dentist"].startswith("cdv_") and ids["Standup"].startswith("cdv_")
    assert (await CalDavEvents(rig.remote).load(ctx, ids["Dentist"]))["title"] == "Dentist"
    for title in ("Haircut", "Dentist"):
        await rig.turns.send(rig.ctx, rig.thread, "what's on my calendar this week?")
        proposed = await rig.turns.send(rig.ctx, rig.thread, f"cancel the {title.lower()}")
        assert proposed.approval is not None and title in proposed.approval.preview, proposed.reply
        done = await rig.turns.decide(rig.ctx, proposed.approval.approval_id, {"type": "approve"})
        assert done.outcome == "executed", done.reply
    assert {e.title: e.status for e in await _events(rig)} == {"Standup": "CONFIRMED", "Dentist": "CANCELLED",
                                                               "Haircut": "CANCELLED"}


async def test_an_event_changed_after_the_approval_was_asked_is_not_written(rig: Rig) -> None:
    await rig.turns.send(rig.ctx, rig.thread, "what's on my calendar this week?")
    proposed = await rig.turns.send(rig.ctx, rig.thread, "cancel the 2nd one")
    assert proposed.approval is not None
    dentist = next(e for e in await _events(rig) if e.title == "Dentist")
    await rig.remote.update(dentist, now=NOW, location="Moved to room 2")  # another client, meanwhile
    done = await rig.turns.decide(rig.ctx, proposed.approval.approval_id, {"type": "approve"})
    assert done.outcome != "executed"
    assert done.reply is not None and "changed on the calendar server" in done.reply
    assert [(e.title, e.status, e.location) for e in await _events(rig)] == [
        ("Standup", "CONFIRMED", ""), ("Dentist", "CONFIRMED", "Moved to room 2")]


async def test_a_write_retried_after_a_crash_makes_one_event(rig: Rig, settings: Settings) -> None:
    """The crash between the server's write and the ledger's commit: the same write runs again."""
    svc = rig.turns.runner.services
    create = svc.registry.action("calendar", "create")
    assert create is not None
    from tollgate.tools.args import CalendarCreateArgs

    args = CalendarCreateArgs(title="Offsite", start=NOW + timedelta(days=2), duration_minutes=60)
    for _ in range(2):
        ctx = svc.exec_context(rig.ctx.owner_id, "Europe/Paris", "calendar", None, "apv_" + "7" * 32)
        await create.executor(ctx, args)
    assert [e.title for e in await _events(rig)].count("Offsite") == 1


async def test_a_wrong_password_is_said_clearly_and_names_no_secret(rig: Rig, db: Database) -> None:
    await CredentialStore(db.pool, credentials_cipher(rig.turns.runner.services.settings,
                                                     rig.turns.runner.services.key())).set(
        rig.ctx.owner_id, "calendar", "caldav_password", "wrong-password")
    out = await rig.turns.send(rig.ctx, rig.thread, "what's on my calendar this week?")
    assert out.reply is not None and "wrong-password" not in out.reply and _PASSWORD not in out.reply
    assert out.outcome == "failed" and "the calendar server refused the username or password" in out.reply


async def test_another_owner_stays_on_tollgates_own_table(rig: Rig, db: Database) -> None:
    """A second owner, with the demo data in the built-in table, served by the same registry."""
    other = Context(owner_id=rig.ctx.owner_id + "_b", timezone="Europe/Paris")
    async with owner_transaction(db.pool, other.owner_id) as conn:
        await seed_demo(conn, other.owner_id, NOW, "Europe/Paris")
    out = await rig.turns.send(other, other.owner_id + "/builtin", "what's on my calendar today?")
    assert out.outcome == "read" and out.reply is not None and "Standup" in out.reply
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM calendar_events WHERE owner_id = %s", (rig.ctx.owner_id,))
        assert await cur.fetchone() == {"n": 0}  # the CalDAV owner's events never touched the table


async def test_a_server_gone_mid_conversation_is_said_and_nothing_is_proposed(
    settings: Settings, db: Database, owner: str, tmp_path: Path
) -> None:
    """The reads retry (they are safe to repeat), then the reply says the server could not be reached."""
    with radicale(tmp_path / "away", {"alice": _PASSWORD}) as own:
        cfg = _reach(settings, owner)
        url = own.calendar("alice")
        await _connect(cfg, db, owner, url)
        remote = CalDavCalendar(egress_client(cfg), CalDavAccount(url, "alice", _PASSWORD, frozenset({"127.0.0.1"})), PARIS)
        start = NOW + timedelta(hours=26)
        await remote.create("seed", title="Standup", starts_at=start, ends_at=start + timedelta(hours=1), now=NOW)
        services = Services(settings=cfg, db=db, registry=default_registry(cfg), picker_model=OfflinePicker(),
                            clock=Clock(NOW))
        turns = Turns(TurnRunner(build_graph(services, checkpointer=await open_checkpointer(db)), services))
        ctx, thread = Context(owner_id=owner, timezone="Europe/Paris"), owner + "/away"
        assert (await turns.send(ctx, thread, "what's on my calendar this week?")).outcome == "read"
        own.stop()
        out = await turns.send(ctx, thread, "cancel the 1st one")
        assert out.approval is None and out.outcome != "executed"
        assert out.reply is not None and "could not be reached" in out.reply
        own.start()
        back = await turns.send(ctx, thread, "what's on my calendar this week?")
        assert back.outcome == "read" and back.reply is not None and "Standup" in back.reply
        await turns.check_approvals(thread)


async def test_a_dropped_connection_is_retried_for_a_read_and_never_for_a_write(
        rig: Rig, settings: Settings, db: Database, owner: str, server: RadicaleServer) -> None:
    """The calendar server drops a connection. A list is safe to repeat: it is retried and
    answers. A cancel is a remote write: it is tried once, fails honestly, and the event stays."""
    async with flaky_relay(server.port) as relay:
        cfg = _reach(settings, owner)
        store = CredentialStore(db.pool, credentials_cipher(cfg, cfg.approval_key()))
        await store.set(owner, "calendar", "caldav_url", rig.remote.url.replace(server.url, f"http://127.0.0.1:{relay.port}"))

        relay.drop_next()
        listed = await rig.turns.send(rig.ctx, rig.thread, "what's on my calendar this week?")
        assert listed.outcome == "read" and listed.reply is not None and "Dentist" in listed.reply, listed.reply
        assert relay.dropped == 1 and relay.connections >= 2  # the retry went through

        proposed = await rig.turns.send(rig.ctx, rig.thread, "cancel the 2nd one")
        assert proposed.approval is not None and "Dentist" in proposed.approval.preview
        relay.drop_next(2)  # were the write retried, its retry would be dropped too
        before = relay.connections
        done = await rig.turns.decide(rig.ctx, proposed.approval.approval_id, {"type": "approve"})
        assert done.outcome != "executed" and done.reply is not None and "could not be reached" in done.reply, done.reply
        assert relay.connections == before + 1  # one try, no second
        assert [(e.title, e.status) for e in await _events(rig)] == [("Standup", "CONFIRMED"), ("Dentist", "CONFIRMED")]
        await rig.turns.check_approvals(rig.thread)


async def test_a_process_killed_after_the_server_stored_the_change_records_it_done(
    settings: Settings, db: Database, owner: str, server: RadicaleServer
) -> None:
    """Killed after the CalDAV server took the cancel, before Tollgate recorded it: the next process to
    take the thread asks the server, records the cancel as done, and writes nothing again."""
    cfg = _reach(settings, owner)
    url = server.calendar("alice", "crash-" + owner[-8:])
    await _connect(cfg, db, owner, url)
    remote = CalDavCalendar(egress_client(cfg), CalDavAccount(url, "alice", _PASSWORD, frozenset({"127.0.0.1"})), PARIS)
    soon = datetime.now(UTC) + timedelta(hours=2)
    for key, title, hours in (("seed-1", "Standup", 0), ("seed-2", "Dentist", 1)):
        await remote.create(key, title=title, starts_at=soon + timedelta(hours=hours),
                            ends_at=soon + timedelta(hours=hours, minutes=30), now=soon)
    thread = f"{owner}/caldav-crash"
    proposed = run_connector_step(cfg, "propose-cancel", owner, thread)
    assert proposed.returncode == 0, proposed.stderr[-2000:]
    approval_id = json.loads(proposed.stdout.strip().splitlines()[-1])["approval_id"]
    assert approval_id is not None, proposed.stdout
    crashed = run_connector_step(cfg, "approve-and-crash-after-put", owner, thread, approval_id)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    after = await remote.list(soon - timedelta(hours=1), None)
    assert [(e.title, e.status) for e in after] == [("Standup", "CONFIRMED"), ("Dentist", "CANCELLED")]

    async with open_app(cfg.model_copy(update={"thread_lease_seconds": 2.0}), picker_model=ScriptedModel(steps=[])) as app:
        await asyncio.sleep(2.5)  # the dead process's lease runs out
        with pytest.raises(ApprovalInvalid) as refused:  # taking the thread settles the intent first
            await app.runner.decide(Context(owner_id=owner, timezone="Europe/Paris"), approval_id, {"type": "approve"})
        await check_approvals(db.pool, app.runner.graph, [thread])
    assert "already executed" in refused.value.message
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT status FROM approvals WHERE approval_id = %s", (approval_id,))
        assert await cur.fetchone() == {"status": "executed"}
        cur = await conn.execute("SELECT state FROM effects WHERE idem_key = %s", (approval_id,))
        assert await cur.fetchone() == {"state": "done"}
    assert [e.etag for e in await remote.list(soon - timedelta(hours=1), None)] == [e.etag for e in after]  # not rewritten
