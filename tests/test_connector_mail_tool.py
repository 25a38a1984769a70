"""The mail tool on an owner's IMAP and SMTP accounts, through the real compiled graph and real servers.

Dovecot holds the mailboxes, aiosmtpd takes what is sent and delivers it into them
(:mod:`tests.mail_server`). The owner's backend is a setting (``mail_backend_owners``); their
account is five encrypted credentials of the mail tool. The offline picker drives the turns, so
the whole chat flow runs: list, "trash the 2nd one", approve, and the server's state changes once.
A process killed after the server took a message, before Tollgate recorded it, never sends it again.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

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
from tests.children import run_connector_step
from tests.conftest import NOW, all_rows
from tests.fakes import ScriptedModel, call
from tests.flaky_proxy import flaky_relay
from tests.harness import Clock, Turns
from tests.mail_server import MailServers, mail_servers
from tollgate.tools.builtin import default_registry
from tollgate.tools.connectors.imap import ImapMailbox, MailAccount
from tollgate.tools.connectors.imap_mail import ACCOUNT_NAMES, IMAP_MAIL
from tollgate.tools.demo import seed_demo

_USERS = {"alice": "mail-pass-7", "bob": "bob-pass-3"}


@pytest.fixture(scope="module")
def servers() -> Iterator[MailServers]:
    with mail_servers(_USERS) as running:
        yield running


def _letter(subject: str, sender: str = "Sam <sam@elsewhere.test>") -> bytes:
    return f"From: {sender}\r\nTo: alice@example.test\r\nSubject: {subject}\r\n\r\nAbout {subject}.\r\n".encode()


def _reach(settings: Settings, owner: str) -> Settings:
    return settings.model_copy(update={"mail_backend_owners": {owner: "imap"}, "egress_allow_networks": ["127.0.0.0/8"],
                                       "connector_plaintext_hosts": ["127.0.0.1"]})


async def _connect(cfg: Settings, db: Database, owner: str, servers: MailServers, password: str) -> None:
    store = CredentialStore(db.pool, credentials_cipher(cfg, cfg.approval_key()))
    values = (servers.imap_url, servers.smtp_url, "alice", password, servers.address("alice"))
    for name, value in zip(ACCOUNT_NAMES, values, strict=True):
        await store.set(owner, "mail", name, value)


def _mailbox(cfg: Settings, servers: MailServers, user: str) -> ImapMailbox:
    account = MailAccount(servers.imap_url, servers.smtp_url, user, _USERS[user], servers.address(user),
                          frozenset({"127.0.0.1"}))
    return ImapMailbox(egress_client(cfg), account)


@dataclass
class Rig:
    turns: Turns
    ctx: Context
    box: ImapMailbox
    """Alice's mailbox as another client sees it."""
    bob: ImapMailbox
    servers: MailServers
    thread: str

    async def servers_deliver_again(self, subject: str) -> None:
        """A new copy of ``subject`` arrives (another UID: the approved id still names the moved one)."""
        self.servers.deliver("alice", _letter(subject))


@pytest.fixture
async def rig(settings: Settings, db: Database, owner: str, servers: MailServers) -> AsyncIterator[Rig]:
    cfg = _reach(settings, owner)
    await _connect(cfg, db, owner, servers, _USERS["alice"])
    box, bob = _mailbox(cfg, servers, "alice"), _mailbox(cfg, servers, "bob")
    for user in _USERS:
        servers.empty(user)
    for subject in ("Quarterly report", "Weekly newsletter", "Dinner on Friday"):
        servers.deliver("alice", _letter(subject))
    services = Services(settings=cfg, db=db, registry=default_registry(cfg), picker_model=OfflinePicker(), clock=Clock(NOW))
    turns = Turns(TurnRunner(build_graph(services, checkpointer=await open_checkpointer(db)), services))
    yield Rig(turns, Context(owner_id=owner, timezone="Europe/Paris"), box, bob, servers, f"{owner}/imap")


async def _subjects(box: ImapMailbox, folder: str) -> list[str]:
    found, _ = await box.list(folder, limit=50)  # type: ignore[arg-type]
    return [m.subject for m in found]


async def test_list_trash_the_2nd_one_approve_and_the_server_changes_once(rig: Rig) -> None:
    listed = await rig.turns.send(rig.ctx, rig.thread, "check my inbox")
    assert listed.outcome == "read" and listed.reply is not None
    assert listed.reply.index("Dinner on Friday") < listed.reply.index("Weekly newsletter")  # newest first
    proposed = await rig.turns.send(rig.ctx, rig.thread, "trash the 2nd one")
    assert proposed.approval is not None and "Weekly newsletter" in proposed.approval.preview
    done = await rig.turns.decide(rig.ctx, proposed.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed", done.reply
    assert await _subjects(rig.box, "inbox") == ["Dinner on Friday", "Quarterly report"]
    assert await _subjects(rig.box, "trash") == ["Weekly newsletter"]  # moved, not deleted
    await rig.turns.check_approvals(rig.thread)


async def test_the_servers_ids_are_their_own_kind_and_bind_only_for_their_owner(
        rig: Rig, settings: Settings, db: Database) -> None:
    """An IMAP owner's messages are ``imap_mail`` ids. A list the owner saw on Tollgate's tables
    before moving to their own server stays in the thread, but its ids (and "#2" into it) no
    longer bind: they name nothing on the server. Another owner on the tables cannot bind the
    server's ids either."""
    async with owner_transaction(db.pool, rig.ctx.owner_id) as conn:
        await seed_demo(conn, rig.ctx.owner_id, NOW, "Europe/Paris")
    tables = Services(settings=settings, db=db, registry=default_registry(settings), picker_model=OfflinePicker(),
                      clock=Clock(NOW))
    before = Turns(TurnRunner(build_graph(tables, checkpointer=await open_checkpointer(db)), tables))
    assert (await before.send(rig.ctx, rig.thread, "check my inbox")).outcome == "read"  # on the tables still

    assert (await rig.turns.send(rig.ctx, rig.thread, "check my inbox")).outcome == "read"  # now on IMAP
    state = (await rig.turns.runner.graph.aget_state({"configurable": {"thread_id": rig.thread}})).values
    on_server = [row["id"] for row in state["recent"]["imap_mail"]["rows"]]
    on_tables = [row["id"] for row in state["recent"]["mail"]["rows"]]
    assert len(on_server) == 3 and all(IMAP_MAIL.accepts(i) for i in on_server)
    assert on_tables and not any(IMAP_MAIL.accepts(i) for i in on_tables)

    proposed = await rig.turns.send(rig.ctx, rig.thread, "trash the 2nd one")  # the server's list, not the tables'
    assert proposed.approval is not None and "Weekly newsletter" in proposed.approval.preview
    assert proposed.approval.args == {"message_ids": [on_server[1]]}

    registry = rig.turns.runner.services.registry
    trash = registry.action("mail", "trash")
    assert trash is not None and trash.id_fields_of(rig.ctx.owner_id) == {"message_ids": "imap_mail"}
    bound, refused, _ = bind_plan_ids(registry, trash, {"message_ids": [on_server[0]]}, state, rig.ctx.owner_id)
    assert refused is None and bound == {"message_ids": [on_server[0]]}
    _, refused, noun = bind_plan_ids(registry, trash, {"message_ids": [on_tables[0]]}, state, rig.ctx.owner_id)
    assert refused is not None and refused.refusal == "bad_id" and noun == "mail"  # a table id is no server id
    other = rig.ctx.owner_id + "_b"
    assert trash.id_fields_of(other) == {"message_ids": "mail"}
    _, refused, _ = bind_plan_ids(registry, trash, {"message_ids": [on_server[0]]}, state, other)
    assert refused is not None and refused.refusal == "not_returned"
    await rig.turns.check_approvals(rig.thread)


async def test_a_message_moved_by_another_client_after_the_approval_was_asked_is_not_touched(rig: Rig) -> None:
    """The mail analogue of a stale ETag: the approved id names a message no longer where it was listed."""
    await rig.turns.send(rig.ctx, rig.thread, "check my inbox")
    proposed = await rig.turns.send(rig.ctx, rig.thread, "trash the 2nd one")
    assert proposed.approval is not None
    newsletter = next(m for m in (await rig.box.list("inbox"))[0] if m.subject == "Weekly newsletter")
    await rig.box.trash([newsletter])  # another mail client, meanwhile
    await rig.servers_deliver_again("Weekly newsletter")
    done = await rig.turns.decide(rig.ctx, proposed.approval.approval_id, {"type": "approve"})
    assert done.outcome != "executed" and done.reply is not None
    assert "no longer where it was listed" in done.reply and "nothing was changed" in done.reply, done.reply
    assert await _subjects(rig.box, "trash") == ["Weekly newsletter"]  # only the other client's move
    assert sorted(await _subjects(rig.box, "inbox")) == ["Dinner on Friday", "Quarterly report", "Weekly newsletter"]
    await rig.turns.check_approvals(rig.thread)


async def test_reading_does_not_mark_read_and_mark_read_does(rig: Rig) -> None:
    await rig.turns.send(rig.ctx, rig.thread, "check my inbox")
    opened = await rig.turns.send(rig.ctx, rig.thread, "read the first one")
    assert opened.outcome == "read" and opened.reply is not None and "About Dinner on Friday." in opened.reply
    assert [m.is_read for m in (await rig.box.list("inbox"))[0]] == [False, False, False]
    marked = await rig.turns.send(rig.ctx, rig.thread, "mark the first one read")
    assert marked.outcome == "executed", marked.reply
    assert [m.is_read for m in (await rig.box.list("inbox"))[0]] == [True, False, False]
    unread = await rig.turns.send(rig.ctx, rig.thread, "any unread mail?")
    assert unread.reply is not None and "Dinner on Friday" not in unread.reply and "Weekly newsletter" in unread.reply


async def test_a_send_is_approved_delivered_once_and_shows_in_sent(rig: Rig) -> None:
    before = len(rig.servers.accepted())
    proposed = await rig.turns.send(rig.ctx, rig.thread, "email bob@example.test that I'll be 10 minutes late")
    assert proposed.approval is not None and "bob@example.test" in proposed.approval.preview
    done = await rig.turns.decide(rig.ctx, proposed.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed", done.reply
    taken = rig.servers.accepted()[before:]
    assert len(taken) == 1 and taken[0]["to"] == ["bob@example.test"]
    assert ".tollgate@example.test>" in taken[0]["message_id"]  # the Message-ID of the write's key
    assert len(await _subjects(rig.bob, "inbox")) == 1  # delivered into Bob's mailbox
    assert len(await _subjects(rig.box, "sent")) == 1 and await _subjects(rig.box, "drafts") == []
    await rig.turns.check_approvals(rig.thread)


async def test_a_recipient_the_server_refused_is_not_claimed_as_sent_to(rig: Rig) -> None:
    proposed = await rig.turns.send(rig.ctx, rig.thread,
                                    "email bob@example.test and nobody@refused.test that the office is closed")
    assert proposed.approval is not None and "nobody@refused.test" in proposed.approval.preview
    done = await rig.turns.decide(rig.ctx, proposed.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed" and done.reply is not None, done.reply
    assert "to bob@example.test." in done.reply and "refused nobody@refused.test" in done.reply, done.reply
    assert len(await _subjects(rig.bob, "inbox")) == 1


async def test_a_send_whose_answer_never_came_is_unknown_and_never_sent_again(rig: Rig) -> None:
    """The server took it but the connection dropped before it said so: the draft stays, nothing is resent."""
    before = len(rig.servers.accepted())
    rig.servers.drop_next_answer()
    proposed = await rig.turns.send(rig.ctx, rig.thread, "email bob@example.test that the meeting moved to 3pm")
    assert proposed.approval is not None
    done = await rig.turns.decide(rig.ctx, proposed.approval.approval_id, {"type": "approve"})
    assert done.outcome != "executed" and done.reply is not None
    assert "could not confirm" in done.reply or "may or may not have been sent" in done.reply, done.reply
    assert len(rig.servers.accepted()) == before + 1
    assert len(await _subjects(rig.box, "drafts")) == 1  # left for the owner to check
    with pytest.raises(ApprovalInvalid):
        await rig.turns.decide(rig.ctx, proposed.approval.approval_id, {"type": "approve"})
    assert len(rig.servers.accepted()) == before + 1
    await rig.turns.check_approvals(rig.thread)


async def test_a_wrong_password_is_said_clearly_and_names_no_secret(rig: Rig, db: Database) -> None:
    svc = rig.turns.runner.services
    await CredentialStore(db.pool, credentials_cipher(svc.settings, svc.key())).set(
        rig.ctx.owner_id, "mail", "mail_password", "wrong-password")
    out = await rig.turns.send(rig.ctx, rig.thread, "check my inbox")
    assert out.reply is not None and "wrong-password" not in out.reply and _USERS["alice"] not in out.reply
    assert out.outcome == "failed" and "the mail server refused the username or password" in out.reply


async def test_another_owner_stays_on_tollgates_own_tables(rig: Rig, db: Database) -> None:
    other = Context(owner_id=rig.ctx.owner_id + "_b", timezone="Europe/Paris")
    async with owner_transaction(db.pool, other.owner_id) as conn:
        await seed_demo(conn, other.owner_id, NOW, "Europe/Paris")
    out = await rig.turns.send(other, other.owner_id + "/builtin", "check my inbox")
    assert out.outcome == "read" and out.reply is not None and "Quarterly report" not in out.reply
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM mail_messages WHERE owner_id = %s", (rig.ctx.owner_id,))
        assert await cur.fetchone() == {"n": 0}  # the IMAP owner's mail never touched the tables


async def test_a_trigger_rule_on_mail_from_the_owners_server_is_refused_not_left_idle(rig: Rig, db: Database) -> None:
    """Trigger rules watch Tollgate's own tables: a rule on mail the owner keeps on their IMAP server
    would never fire, so it is refused when proposed, saying why. A rule on their events (still in
    Tollgate's calendar) is proposed as ever."""
    model = ScriptedModel(steps=[])
    services = Services(settings=rig.turns.runner.services.settings, db=db,
                        registry=rig.turns.runner.services.registry, picker_model=model, clock=Clock(NOW))
    turns = Turns(TurnRunner(build_graph(services, checkpointer=await open_checkpointer(db)), services))
    mail_rule = {"match": {"kind": "mail", "sender": "sam@elsewhere.test"}, "instruction": "summarize it"}
    model.push(call("triggers__create", mail_rule))
    out = await turns.send(rig.ctx, rig.thread, "when Sam emails me, summarize it")
    assert out.approval is None and out.reply is not None, out.reply
    assert "do not watch yet" in out.reply and "no rule was made" in out.reply, out.reply
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM trigger_rules WHERE owner_id = %s", (rig.ctx.owner_id,))
        assert await cur.fetchone() == {"n": 0}
    event_rule = {"match": {"kind": "event", "title_contains": "Standup", "lead_minutes": 30}, "instruction": "x"}
    model.push(call("triggers__create", event_rule))
    events = await turns.send(rig.ctx, rig.thread, "30 minutes before any standup, list my open tasks")
    assert events.approval is not None and events.approval.action == "create", events.reply
    await turns.check_approvals(rig.thread)


async def test_a_server_gone_mid_conversation_is_said_and_nothing_is_proposed(rig: Rig) -> None:
    assert (await rig.turns.send(rig.ctx, rig.thread, "check my inbox")).outcome == "read"
    rig.servers.stop_imap()
    try:
        out = await rig.turns.send(rig.ctx, rig.thread, "trash the 1st one")
        assert out.approval is None and out.outcome != "executed"
        assert out.reply is not None and "could not be reached" in out.reply
    finally:
        rig.servers.start_imap()
    back = await rig.turns.send(rig.ctx, rig.thread, "check my inbox")
    assert back.outcome == "read" and back.reply is not None and "Quarterly report" in back.reply
    await rig.turns.check_approvals(rig.thread)


async def test_a_dropped_connection_is_retried_for_a_read_and_never_for_a_send(
        rig: Rig, settings: Settings, db: Database, owner: str, servers: MailServers) -> None:
    """The mailbox drops one connection. A list is safe to repeat: it is retried and answers. A
    send is not: it fails once, honestly, and nothing reaches the SMTP server."""
    async with flaky_relay(servers.imap_port) as relay:
        cfg = _reach(settings, owner)
        store = CredentialStore(db.pool, credentials_cipher(cfg, cfg.approval_key()))
        await store.set(owner, "mail", "imap_url", f"imap://127.0.0.1:{relay.port}")

        relay.drop_next()
        listed = await rig.turns.send(rig.ctx, rig.thread, "check my inbox")
        assert listed.outcome == "read" and listed.reply is not None and "Weekly newsletter" in listed.reply
        assert relay.dropped == 1 and relay.connections >= 2  # the retry went through

        proposed = await rig.turns.send(rig.ctx, rig.thread, "email sam@elsewhere.test that I'll be late")
        assert proposed.approval is not None, proposed.reply
        relay.drop_next()
        before, sent_before = relay.connections, len(rig.servers.accepted())
        done = await rig.turns.decide(rig.ctx, proposed.approval.approval_id, {"type": "approve"})
        assert done.outcome != "executed" and done.reply is not None and "could not be reached" in done.reply, done.reply
        assert relay.connections == before + 1  # one try, no second
        assert len(rig.servers.accepted()) == sent_before and await _subjects(rig.box, "drafts") == []
        await rig.turns.check_approvals(rig.thread)


@pytest.mark.parametrize("where", ["after-sent", "after-smtp"])
async def test_a_process_killed_after_the_server_took_the_message_never_sends_it_again(
    settings: Settings, db: Database, owner: str, servers: MailServers, where: str
) -> None:
    """Killed once the message is in Sent (reconciled: done), or once SMTP took it but before it was
    saved to Sent (reconciled: unknown, and the owner is told). Either way it went out once."""
    cfg = _reach(settings, owner)
    await _connect(cfg, db, owner, servers, _USERS["alice"])
    box = _mailbox(cfg, servers, "alice")
    servers.empty("alice")
    thread = f"{owner}/imap-crash"
    proposed = run_connector_step(cfg, "propose-send", owner, thread)
    assert proposed.returncode == 0, proposed.stderr[-2000:]
    approval_id = json.loads(proposed.stdout.strip().splitlines()[-1])["approval_id"]
    before = len(servers.accepted())
    crashed = run_connector_step(cfg, f"approve-and-crash-{where}", owner, thread, approval_id)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    assert len(servers.accepted()) == before + 1  # the server took it; Tollgate recorded nothing

    async with open_app(cfg.model_copy(update={"thread_lease_seconds": 2.0}), picker_model=ScriptedModel(steps=[])) as app:
        await asyncio.sleep(2.5)  # the dead process's lease runs out
        me = Context(owner_id=owner, timezone="Europe/Paris")
        with pytest.raises(ApprovalInvalid) as refused:  # taking the thread settles the intent first
            await app.runner.decide(me, approval_id, {"type": "approve"})
        await check_approvals(db.pool, app.runner.graph, [thread])
    assert len(servers.accepted()) == before + 1  # never sent twice
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT status FROM approvals WHERE approval_id = %s", (approval_id,))
        status = (await cur.fetchone() or {}).get("status")
    if where == "after-sent":
        assert status == "executed" and "already executed" in refused.value.message
    else:
        assert status == "failed" and "could not confirm whether it happened" in refused.value.message
        assert len(await _subjects(box, "drafts")) == 1


async def test_trash_and_mark_read_are_reconciled_from_the_servers_state(rig: Rig) -> None:
    """What the reconcile hooks say of a trash or a mark read interrupted after its intent: read off the server."""
    svc = rig.turns.runner.services
    trash, mark = svc.registry.action("mail", "trash"), svc.registry.action("mail", "mark_read")
    assert trash is not None and trash.reconcile is not None and trash.leaves_tollgate(rig.ctx.owner_id)
    assert mark is not None and mark.reconcile is not None and mark.leaves_tollgate(rig.ctx.owner_id)
    from tollgate.tools.args import MailMarkReadArgs, MailTrashArgs

    listed, _ = await rig.box.list("inbox")
    ids = [m.id for m in listed[:2]]
    ctx = svc.exec_context(rig.ctx.owner_id, "Europe/Paris", "mail", None, "apv_" + "8" * 32)
    assert (await mark.reconcile(ctx, MailMarkReadArgs(message_ids=ids))).outcome == "not_done"
    assert (await trash.reconcile(ctx, MailTrashArgs(message_ids=ids))).outcome == "not_done"
    await rig.box.mark_read(listed[:2])
    assert (await mark.reconcile(ctx, MailMarkReadArgs(message_ids=ids))).outcome == "done"
    await rig.box.trash(listed[:1])
    assert (await trash.reconcile(ctx, MailTrashArgs(message_ids=ids))).outcome == "unknown"  # one of two moved
    await rig.box.trash(listed[1:2])
    found = await trash.reconcile(ctx, MailTrashArgs(message_ids=ids))
    assert found.outcome == "done" and found.result is not None and found.result["changed"] == 2
    builtin_owner = svc.exec_context(rig.ctx.owner_id + "_b", "Europe/Paris", "mail", None, "apv_" + "9" * 32)
    assert not trash.leaves_tollgate(builtin_owner.owner_id)  # an owner on Tollgate's tables writes locally
