"""The IMAP and SMTP connector against a real Dovecot and a real SMTP server (tests/mail_server.py)."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tollgate.graph._env import child_environment
from tollgate.tools.perimeter.config import egress_client
from tollgate.graph.perimeter.credentials import CredentialStore, credentials_cipher
from tollgate.tools.perimeter.egress_transport import EgressClient
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database
from tollgate.policies.egress import EgressPolicy
from tollgate.policies.errors import EgressDenied, NotFound
from tests.conftest import NOW
from tests.flaky_proxy import flaky_relay
from tests.harness import Clock
from tests.mail_server import TLS_NAME, MailServers, mail_servers
from tests.server_harness import LiveServer, issue_token, serve
from tollgate.tools.connectors.errors import AccountRefused, ServerAway
from tollgate.tools.connectors.imap import ImapMailbox, MailAccount, SendUncertain
from tollgate.tools.connectors.imap_session import CannotMove
from tollgate.tools.connectors.smtp import SendRefused

_USERS = {"alice": "alice-imap-1", "bob": "bob-imap-2"}
_TOLLGATE = str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "tollgate")
_LOOPBACK = frozenset({"127.0.0.1"})


@pytest.fixture(scope="module")
def servers() -> Iterator[MailServers]:
    with mail_servers(_USERS) as running:
        yield running


@pytest.fixture(autouse=True)
def _clean(servers: MailServers) -> None:
    for user in _USERS:
        servers.empty(user)


def _http(settings: Settings) -> EgressClient:
    return egress_client(settings.model_copy(update={"egress_allow_networks": ["127.0.0.0/8"]}))


def _box(settings: Settings, servers: MailServers, user: str = "alice", *, password: str | None = None,
         imap_url: str | None = None, plaintext: frozenset[str] = _LOOPBACK) -> ImapMailbox:
    account = MailAccount(imap_url or servers.imap_url, servers.smtp_url, user,
                          _USERS[user] if password is None else password, servers.address(user), plaintext)
    return ImapMailbox(_http(settings), account)


def _letter(subject: str, body: str = "Hello.", sender: str = "sam@elsewhere.test", headers: str = "") -> bytes:
    return (f"From: {sender}\r\nTo: alice@example.test\r\nSubject: {subject}\r\n{headers}\r\n{body}\r\n").encode()


async def test_list_filters_read_mark_read_and_trash_without_deleting(settings: Settings, servers: MailServers) -> None:
    servers.deliver("alice", _letter("From the bank", sender="Bank <alerts@bank.example>"))
    servers.deliver("alice", _letter("Lunch?"))
    box = _box(settings, servers)
    listed, more = await box.list("inbox")
    assert [m.subject for m in listed] == ["Lunch?", "From the bank"] and not more  # newest first
    assert [m.subject for m in (await box.list("inbox", contains="bank"))[0]] == ["From the bank"]
    assert [m.subject for m in (await box.list("inbox", limit=1))[0]] == ["Lunch?"] and (await box.list("inbox", limit=1))[1]
    opened = await box.read(listed[0].id)
    assert opened.body.strip() == "Hello." and not opened.is_read
    assert not (await box.messages([listed[0].id]))[0].is_read  # reading did not mark it read
    assert await box.mark_read(listed) == {m.id for m in listed}
    assert (await box.list("inbox", unread_only=True))[0] == []
    assert await box.trash(listed[:1]) == {listed[0].id}
    assert await box.trash(listed[:1]) == set()  # no longer where it was listed: left alone
    assert [m.subject for m in (await box.list("trash"))[0]] == ["Lunch?"]  # moved, kept
    with pytest.raises(NotFound):
        await box.read(listed[0].id)  # its inbox id names nothing now


@pytest.mark.parametrize("capability", ["IMAP4rev1 LITERAL+ SPECIAL-USE UIDPLUS", "IMAP4rev1 LITERAL+ SPECIAL-USE"],
                         ids=["uidplus-without-move", "neither"])
def test_a_server_without_move_trashes_by_uid_or_refuses(settings: Settings, capability: str) -> None:
    """Without MOVE, trash copies, flags and expunges by UID (UIDPLUS); with neither it refuses and
    changes nothing, since a plain EXPUNGE would remove what the owner flagged deleted elsewhere."""
    async def scenario(servers: MailServers) -> None:
        for subject in ("Keep me", "Bin me"):
            servers.deliver("alice", _letter(subject))
        box = _box(settings, servers)
        listed, _ = await box.list("inbox")
        if "UIDPLUS" in capability:
            assert await box.trash(listed[:1]) == {listed[0].id}
            assert [m.subject for m in (await box.list("trash"))[0]] == ["Bin me"]
            assert [m.subject for m in (await box.list("inbox"))[0]] == ["Keep me"]
        else:
            with pytest.raises(CannotMove):
                await box.trash(listed[:1])
            assert [m.subject for m in (await box.list("inbox"))[0]] == ["Bin me", "Keep me"]
            assert (await box.list("trash"))[0] == []

    with mail_servers(_USERS, imap_capability=capability) as own:
        asyncio.run(scenario(own))


async def test_a_retried_send_finds_its_message_in_sent_instead_of_sending_again(
    settings: Settings, servers: MailServers
) -> None:
    box = _box(settings, servers)
    before = len(servers.accepted())
    first = await box.send("apv_" + "1" * 32, to=[servers.address("bob")], subject="Hi", body="Once.", now=NOW)
    again = await box.send("apv_" + "1" * 32, to=[servers.address("bob")], subject="Hi", body="Once.", now=NOW)
    assert first == again and first.folder == "sent"
    assert len(servers.accepted()) == before + 1
    assert [m.subject for m in (await _box(settings, servers, "bob").list("inbox"))[0]] == ["Hi"]
    assert (await box.list("drafts"))[0] == []
    assert (await box.sent_state("apv_" + "1" * 32))[0] == "sent"
    assert (await box.sent_state("apv_" + "2" * 32))[0] == "not_sent"


async def test_a_message_sent_while_the_mailbox_went_away_is_sent_and_never_sent_again(
    settings: Settings, servers: MailServers
) -> None:
    """The SMTP server took it, then the IMAP server went away before the copy reached Sent: the send
    reports it sent, and its draft stays, so a retry finds the outcome unknown and sends nothing."""
    box = _box(settings, servers)
    before = len(servers.accepted())
    servers.stop_imap_after_next_message()
    try:
        sent = await box.send("apv_" + "9" * 32, to=[servers.address("bob")], subject="Gone", body="Mid-way.", now=NOW)
    finally:
        servers.start_imap()
    assert sent.folder == "sent" and sent.subject == "Gone" and len(servers.accepted()) == before + 1
    assert (await box.sent_state("apv_" + "9" * 32))[0] == "unknown"
    with pytest.raises(SendUncertain):
        await box.send("apv_" + "9" * 32, to=[servers.address("bob")], subject="Gone", body="Mid-way.", now=NOW)
    assert len(servers.accepted()) == before + 1


async def test_a_refused_recipient_sends_nothing_and_leaves_no_draft(settings: Settings, servers: MailServers) -> None:
    box = _box(settings, servers)
    before = len(servers.accepted())
    with pytest.raises(SendRefused) as refused:
        await box.send("apv_" + "3" * 32, to=["nobody@refused.test"], subject="Hi", body="No.", now=NOW)
    assert "nothing was sent" in refused.value.message
    assert len(servers.accepted()) == before and (await box.list("drafts"))[0] == []
    assert (await box.sent_state("apv_" + "3" * 32))[0] == "not_sent"


async def test_a_recipient_refused_among_others_is_named(settings: Settings, servers: MailServers) -> None:
    sent = await _box(settings, servers).send("apv_" + "4" * 32, to=[servers.address("bob"), "nobody@refused.test"],
                                             subject="Both?", body="One of you.", now=NOW)
    assert sent.refused == ("nobody@refused.test",)
    assert [m.subject for m in (await _box(settings, servers, "bob").list("inbox"))[0]] == ["Both?"]


async def test_a_wrong_password_is_a_clear_refusal_that_names_no_secret(settings: Settings, servers: MailServers) -> None:
    with pytest.raises(AccountRefused) as refused:
        await _box(settings, servers, password="hunter2-wrong").check()
    assert refused.value.message == "the mail server refused the username or password"
    assert "hunter2" not in repr(refused.value) and "127.0.0.1" not in refused.value.message
    assert "hunter2" not in repr(_box(settings, servers, password="hunter2-wrong").account)


def test_plain_text_and_other_hosts_are_refused(settings: Settings, servers: MailServers) -> None:
    with pytest.raises(EgressDenied, match="plaintext_refused"):
        _box(settings, servers, plaintext=frozenset())
    with pytest.raises(EgressDenied, match="bad_url"):
        _box(settings, servers, imap_url="https://127.0.0.1:993")
    with pytest.raises(EgressDenied, match="bad_url"):
        _box(settings, servers, imap_url="imaps://alice:pw@127.0.0.1")


async def test_connections_go_to_the_address_the_egress_gate_checked(settings: Settings, servers: MailServers) -> None:
    """A name is resolved once by the gate's resolver; an address it must not reach is refused before connecting."""
    looked_up: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        looked_up.append(host)
        return ["127.0.0.1"] if host == "mail.example.com" else ["169.254.169.254"]

    def box(host: str) -> ImapMailbox:
        http = EgressClient(EgressPolicy.build(allow_networks=["127.0.0.0/8"]), resolver=resolver)
        account = MailAccount(f"imap://{host}:{servers.imap_port}", f"smtp://{host}:{servers.smtp_port}", "alice",
                              _USERS["alice"], servers.address("alice"), frozenset({host}))
        return ImapMailbox(http, account)

    await box("mail.example.com").check()
    assert set(looked_up) == {"mail.example.com"}
    with pytest.raises(EgressDenied, match="metadata"):
        await box("rebind.example.com").check()


def _tls_box(servers: MailServers, host: str, resolver: Any, smtp_host: str | None = None, *,
             starttls: bool = False) -> ImapMailbox:
    http = EgressClient(EgressPolicy.build(allow_networks=["127.0.0.0/8"]), resolver=resolver)
    smtp = (f"smtp+starttls://{smtp_host or host}:{servers.submission_port}" if starttls
            else f"smtps://{smtp_host or host}:{servers.smtps_port}")
    account = MailAccount(f"imaps://{host}:{servers.imaps_port}", smtp, "alice", _USERS["alice"],
                          servers.address("alice"))
    return ImapMailbox(http, account, tls=ssl.create_default_context(cafile=str(servers.ca)))


async def test_tls_to_the_pinned_address_verifies_the_certificate_for_the_host(
    settings: Settings, servers: MailServers
) -> None:
    """Over TLS the connection goes to the address the gate checked, and the certificate is verified
    for the account's host name: a certificate for another name is refused, clearly, not retried."""
    async def loopback(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    box = _tls_box(servers, TLS_NAME, loopback)
    await box.check()
    before = len(servers.accepted())
    sent = await box.send("apv_" + "6" * 32, to=[servers.address("bob")], subject="Over TLS", body="Sealed.", now=NOW)
    assert sent.folder == "sent" and len(servers.accepted()) == before + 1
    with pytest.raises(EgressDenied, match="certificate_refused"):
        await _tls_box(servers, "imposter.example.com", loopback).check()
    with pytest.raises(EgressDenied, match="certificate_refused"):
        await _tls_box(servers, TLS_NAME, loopback, smtp_host="imposter.example.com").send("apv_" + "7" * 32, to=[servers.address("bob")], subject="No", body="No.", now=NOW)
    assert len(servers.accepted()) == before + 1 and (await box.list("drafts"))[0] == []
    submission = _tls_box(servers, TLS_NAME, loopback, starttls=True)  # port 587's way: upgrade, then log in
    await submission.send("apv_" + "8" * 32, to=[servers.address("bob")], subject="Upgraded", body="Then sent.", now=NOW)
    assert len(servers.accepted()) == before + 2
    with pytest.raises(EgressDenied, match="certificate_refused"):
        await _tls_box(servers, TLS_NAME, loopback, "imposter.example.com", starttls=True).check()


async def test_a_server_that_goes_away_is_transient_and_comes_back(settings: Settings, servers: MailServers) -> None:
    servers.deliver("alice", _letter("Still here"))
    box = _box(settings, servers)
    servers.stop_imap()
    try:
        with pytest.raises(ServerAway) as away:
            await box.list("inbox")
        assert away.value.code == "transient" and "could not be reached" in away.value.message
    finally:
        servers.start_imap()
    assert [m.subject for m in (await box.list("inbox"))[0]] == ["Still here"]


async def test_a_connection_the_server_closes_is_away_at_once_not_after_the_timeout(
        settings: Settings, servers: MailServers) -> None:
    """A server that closes the connection (before its greeting, or while a command waits for its
    answer) is :class:`ServerAway` as soon as it does, not after the timeout: aioimaplib alone
    waits it out, and a turn's retries would then take three timeouts to answer."""
    servers.deliver("alice", _letter("Still here"))
    patient = settings.model_copy(update={"egress_timeout_seconds": 60.0})
    async with flaky_relay(servers.imap_port) as relay:
        box = _box(patient, servers, imap_url=f"imap://127.0.0.1:{relay.port}")
        relay.drop_next()
        async with asyncio.timeout(20):  # a third of the timeout: it did not wait for it
            with pytest.raises(ServerAway):
                await box.list("inbox")
        assert relay.dropped == 1
        found, _ = await box.list("inbox")
        assert [m.subject for m in found] == ["Still here"]

        relay.drop_when_sent(b"UID FETCH")  # logged in, the folder selected: the fetch is never answered
        async with asyncio.timeout(20):
            with pytest.raises(ServerAway):
                await box.list("inbox")
        assert relay.dropped == 2


async def test_an_smtp_server_away_sends_nothing_and_leaves_no_draft(settings: Settings, servers: MailServers) -> None:
    box = _box(settings, servers)
    servers.stop_smtp()
    try:
        with pytest.raises(ServerAway):
            await box.send("apv_" + "5" * 32, to=[servers.address("bob")], subject="Later", body="Not now.", now=NOW)
    finally:
        servers.start_smtp()
    assert (await box.list("drafts"))[0] == [] and (await box.sent_state("apv_" + "5" * 32))[0] == "not_sent"


async def test_hostile_messages_are_read_as_text(settings: Settings, servers: MailServers) -> None:
    servers.deliver("alice", _letter("=?utf-8?q?Caf=C3=A9_=00menu?=", body="<p>Soup <b>today</b></p><script>x()</script>",
                                     headers="Content-Type: text/html; charset=utf-8\r\n"))
    box = _box(settings, servers)
    listed, _ = await box.list("inbox")
    assert listed[0].subject == "Café menu"  # decoded, the NUL dropped
    body = (await box.read(listed[0].id)).body
    assert "Soup" in body and "today" in body and "<" not in body and "x()" not in body
    assert (await box.list("inbox", contains="elsewhère"))[0] == []  # outside ASCII: matched here, not sent raw


@pytest.fixture(scope="module")
def api_server(settings: Settings) -> Iterator[LiveServer]:
    allowing = settings.model_copy(update={"egress_allow_networks": ["127.0.0.0/8"],
                                           "connector_plaintext_hosts": ["127.0.0.1"]})
    with serve(allowing, clock=Clock(NOW)) as live:
        yield live


async def _names(settings: Settings, db: Database, owner: str) -> list[tuple[str, str]]:
    return sorted(await CredentialStore(db.pool, credentials_cipher(settings, settings.approval_key())).names(owner))


async def test_the_owner_connects_a_mailbox_over_the_api_only_with_a_login_that_works(
    api_server: LiveServer, servers: MailServers, settings: Settings, db: Database, owner: str
) -> None:
    auth = {"Authorization": f"Bearer {await issue_token(db, owner, label='t')}"}
    body = {"imap_url": servers.imap_url, "smtp_url": servers.smtp_url, "username": "alice",
            "address": servers.address("alice")}
    async with httpx.AsyncClient(base_url=api_server.url, timeout=30) as client:
        refused = await client.put("/v1/me/accounts/imap", headers=auth, json=body | {"password": "not-it"})
        assert refused.status_code == 422, refused.text
        assert "refused the username or password" in refused.text and "not-it" not in refused.text
        assert await _names(settings, db, owner) == []
        done = await client.put("/v1/me/accounts/imap", headers=auth, json=body | {"password": _USERS["alice"]})
        assert done.status_code == 200, done.text
        assert done.json() == {"kind": "imap", "url": servers.imap_url, "username": "alice",
                               "smtp_url": servers.smtp_url, "address": servers.address("alice")}
        assert _USERS["alice"] not in done.text
        assert (await client.get("/v1/me/accounts", headers=auth)).json()["accounts"] == [done.json()]
        assert (await client.delete("/v1/me/accounts/imap", headers=auth)).status_code == 204
        assert (await client.get("/v1/me/accounts", headers=auth)).json() == {"accounts": []}
    assert await _names(settings, db, owner) == []


async def test_the_command_line_connects_and_removes_a_mailbox(
    settings: Settings, servers: MailServers, db: Database, owner: str, tmp_path: Path
) -> None:
    env = child_environment(settings, TOLLGATE_CONNECTOR_PLAINTEXT_HOSTS='["127.0.0.1"]',
                            TOLLGATE_EGRESS_ALLOW_NETWORKS='["127.0.0.0/8"]')
    argv = [_TOLLGATE, "account", "add", "--kind", "imap", "--owner", owner, "--url", servers.imap_url,
            "--smtp-url", servers.smtp_url, "--username", "alice", "--address", servers.address("alice")]
    wrong = subprocess.run(argv, input="not-it\n", env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2, wrong.stdout + wrong.stderr
    assert "refused the username or password" in wrong.stderr and "not-it" not in wrong.stdout + wrong.stderr
    assert await _names(settings, db, owner) == []
    right = subprocess.run(argv, input=_USERS["alice"] + "\n", env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
    assert right.returncode == 0, right.stdout + right.stderr
    assert _USERS["alice"] not in right.stdout + right.stderr
    assert await _names(settings, db, owner) == [("mail", n) for n in sorted(
        ("imap_url", "smtp_url", "mail_username", "mail_password", "mail_address"))]
    gone = subprocess.run([_TOLLGATE, "account", "remove", "--kind", "imap", "--owner", owner], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert gone.returncode == 0 and await _names(settings, db, owner) == []
