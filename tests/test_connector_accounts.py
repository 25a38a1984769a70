"""Connecting an owner's CalDAV account over the API and with ``tollgate account``, against a real Radicale.

A login is tried against the server before anything is stored; a refused one stores nothing
and says so without echoing the password; plain text needs the operator's allowance.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tollgate.graph._env import child_environment
from tollgate.graph.perimeter.credentials import CredentialStore, credentials_cipher
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database
from tests.caldav_server import RadicaleServer, radicale
from tests.conftest import NOW
from tests.harness import Clock
from tests.server_harness import LiveServer, serve
from tollgate.web.auth import issue_token

_PASSWORD = "radicale-pw-3"
_TOLLGATE = str(Path(sys.executable).with_name("tollgate"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RadicaleServer]:
    with radicale(tmp_path_factory.mktemp("radicale-accounts"), {"alice": _PASSWORD}) as running:
        yield running


def _allowing(settings: Settings, *, plaintext: bool = True) -> Settings:
    return settings.model_copy(update={"egress_allow_networks": ["127.0.0.0/8"],
                                      "connector_plaintext_hosts": ["127.0.0.1"] if plaintext else []})


@pytest.fixture(scope="module")
def api_server(settings: Settings) -> Iterator[LiveServer]:
    with serve(_allowing(settings), clock=Clock(NOW)) as live:
        yield live


async def _names(settings: Settings, db: Database, owner: str) -> list[tuple[str, str]]:
    return await CredentialStore(db.pool, credentials_cipher(settings, settings.approval_key())).names(owner)


async def test_the_owner_connects_over_the_api_only_with_a_login_that_works(
    api_server: LiveServer, server: RadicaleServer, settings: Settings, db: Database, owner: str
) -> None:
    auth = {"Authorization": f"Bearer {await issue_token(db, owner, label='t')}"}
    url = server.calendar("alice", "api")
    async with httpx.AsyncClient(base_url=api_server.url, timeout=30) as client:
        refused = await client.put("/v1/me/accounts/caldav", headers=auth,
                                   json={"url": url, "username": "alice", "password": "not-it"})
        assert refused.status_code == 422, refused.text
        assert "refused the username or password" in refused.text and "not-it" not in refused.text
        assert (await client.get("/v1/me/accounts", headers=auth)).json() == {"accounts": []}
        assert await _names(settings, db, owner) == []  # nothing stored
        done = await client.put("/v1/me/accounts/caldav", headers=auth,
                                json={"url": url, "username": "alice", "password": _PASSWORD})
        assert done.status_code == 200, done.text
        assert done.json() == {"kind": "caldav", "url": url, "username": "alice"} and _PASSWORD not in done.text
        assert (await client.get("/v1/me/accounts", headers=auth)).json()["accounts"] == [done.json()]
        assert (await client.delete("/v1/me/accounts/caldav", headers=auth)).status_code == 204
        assert (await client.get("/v1/me/accounts", headers=auth)).json() == {"accounts": []}


async def test_plain_text_needs_the_operators_allowance(
    settings: Settings, server: RadicaleServer, db: Database, owner: str
) -> None:
    auth = {"Authorization": f"Bearer {await issue_token(db, owner, label='t')}"}
    with serve(_allowing(settings, plaintext=False), clock=Clock(NOW)) as live:
        async with httpx.AsyncClient(base_url=live.url, timeout=30) as client:
            refused = await client.put("/v1/me/accounts/caldav", headers=auth,
                                       json={"url": server.calendar("alice", "plain"), "username": "alice",
                                             "password": _PASSWORD})
    assert refused.status_code == 422 and refused.json()["code"] == "egress_denied", refused.text
    assert "plaintext_refused" in refused.text
    assert await _names(settings, db, owner) == []


async def test_the_command_line_connects_and_removes_an_account(
    settings: Settings, server: RadicaleServer, db: Database, owner: str, tmp_path: Path
) -> None:
    env = child_environment(_allowing(settings), TOLLGATE_CONNECTOR_PLAINTEXT_HOSTS='["127.0.0.1"]',
                            TOLLGATE_EGRESS_ALLOW_NETWORKS='["127.0.0.0/8"]')
    url = server.calendar("alice", "cli")
    argv = [_TOLLGATE, "account", "add", "--owner", owner, "--url", url, "--username", "alice"]
    wrong = subprocess.run(argv, input="not-it\n", env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2, wrong.stdout + wrong.stderr
    assert "refused the username or password" in wrong.stderr and "not-it" not in wrong.stdout + wrong.stderr
    assert await _names(settings, db, owner) == []
    right = subprocess.run(argv, input=_PASSWORD + "\n", env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
    assert right.returncode == 0, right.stdout + right.stderr
    assert _PASSWORD not in right.stdout + right.stderr
    assert sorted(await _names(settings, db, owner)) == [
        ("calendar", "caldav_password"), ("calendar", "caldav_url"), ("calendar", "caldav_username")]
    gone = subprocess.run([_TOLLGATE, "account", "remove", "--owner", owner], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert gone.returncode == 0 and await _names(settings, db, owner) == []


async def test_a_lan_account_is_allowed_for_its_owner_alone_in_production_and_refusals_name_the_setting() -> None:
    """An owner's mail server at home (``mail.home.example`` on 192.168.1.20): refused by default,
    the refusal naming the setting that would allow it; allowed in production for exactly the
    owner and kind ``TOLLGATE_CONNECTOR_PRIVATE_NETWORKS`` lists; a metadata address never."""
    from tollgate.policies.errors import EgressDenied
    from tollgate.tools.connectors.backends import private_network_owners
    from tollgate.tools.connectors.imap import ImapMailbox, MailAccount
    from tollgate.tools.perimeter.config import egress_client

    production = Settings(environment="production", approval_secret="x" * 32,
                          connector_private_networks={"alice": ["imap"]})
    addresses = {"mail.home.example": ["192.168.1.20"], "metadata.home.example": ["169.254.169.254"]}

    async def resolve(host: str, port: int) -> list[str]:
        return addresses[host]

    http = egress_client(production, resolver=resolve)
    on_lan = private_network_owners(production.model_dump(), "imap")
    assert on_lan == {"alice"} and private_network_owners(production.model_dump(), "caldav") == set()

    def mailbox(owner: str, host: str = "mail.home.example") -> ImapMailbox:
        account = MailAccount(f"imaps://{host}", f"smtps://{host}", "u", "p", f"{owner}@home.example",
                              private_network=owner in on_lan)
        return ImapMailbox(http, account)

    allowed = mailbox("alice")
    assert await allowed._http.address("mail.home.example", 993) == "192.168.1.20"  # noqa: SLF001 - the one it connects to

    refused = mailbox("bob")
    with pytest.raises(EgressDenied) as denied:
        await refused._http.address("mail.home.example", 993)  # noqa: SLF001
    assert denied.value.reason == "non_global_address"
    assert "TOLLGATE_CONNECTOR_PRIVATE_NETWORKS" in denied.value.message

    with pytest.raises(EgressDenied) as metadata:
        await mailbox("alice", "metadata.home.example")._http.address("metadata.home.example", 993)  # noqa: SLF001
    assert metadata.value.reason == "metadata_endpoint" and "allow" not in metadata.value.message

    assert "TOLLGATE_EGRESS_ALLOW_HOSTS" in EgressDenied("not_allowlisted").message
    assert "TOLLGATE_CONNECTOR_PLAINTEXT_HOSTS" in EgressDenied("plaintext_refused").message
