"""The CalDAV connector against a real Radicale server on loopback (``tests/caldav_server.py``).

Through the egress gate (loopback allowed as for every test server, the account's host only),
with plain text allowed for 127.0.0.1 as an operator would allow it for a LAN server.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from tollgate.tools.perimeter.config import egress_client
from tollgate.graph.settings import Settings
from tollgate.policies.errors import EgressDenied, NotFound, Transient
from tests.caldav_server import RadicaleServer, radicale
from tollgate.tools.connectors.caldav import AccountRefused, CalDavAccount, CalDavCalendar, StaleEvent

PARIS = ZoneInfo("Europe/Paris")
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=PARIS)
_PASSWORD = "s3cret-horse-battery"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RadicaleServer]:
    with radicale(tmp_path_factory.mktemp("radicale"), {"alice": _PASSWORD, "bob": "bobs-password"}) as running:
        yield running


def _calendar(settings: Settings, server: RadicaleServer, *, user: str = "alice", password: str = _PASSWORD,
              name: str = "calendar") -> CalDavCalendar:
    http = egress_client(settings.model_copy(update={"egress_allow_networks": ["127.0.0.0/8"]}))
    account = CalDavAccount(server.calendar(user, name) if password == server.users.get(user) else
                            f"{server.url}/{user}/{name}/", user, password, plaintext_hosts=frozenset({"127.0.0.1"}))
    return CalDavCalendar(http, account, PARIS)


async def test_create_list_get_and_cancel_without_deleting(settings: Settings, server: RadicaleServer) -> None:
    cal = _calendar(settings, server, name="flow")
    await cal.check()
    start = NOW + timedelta(days=1)
    made = await cal.create("key-1", title="Dentist", starts_at=start, ends_at=start + timedelta(hours=1),
                            location="12 rue Oberkampf", now=NOW)
    assert made.title == "Dentist" and made.etag and made.starts_at == start
    listed = await cal.list(NOW, NOW + timedelta(days=7))
    assert [(e.title, e.location) for e in listed] == [("Dentist", "12 rue Oberkampf")]
    assert await cal.list(NOW + timedelta(days=2), NOW + timedelta(days=7)) == []  # the range is the server's filter
    cancelled = await cal.cancel(listed[0], now=NOW)
    assert cancelled.status == "CANCELLED"
    assert (await cal.get(made.href)).status == "CANCELLED"  # still there: cancelled, never deleted


async def test_a_retried_create_finds_its_event_instead_of_making_a_second(
    settings: Settings, server: RadicaleServer
) -> None:
    """The crash between the server's write and our commit: the same write again makes nothing new."""
    cal = _calendar(settings, server, name="retry")
    start = NOW + timedelta(days=3)
    first = await cal.create("key-once", title="Lunch", starts_at=start, ends_at=start + timedelta(hours=1), now=NOW)
    again = await cal.create("key-once", title="Lunch", starts_at=start, ends_at=start + timedelta(hours=1), now=NOW)
    assert again.href == first.href and again.uid == first.uid
    assert len(await cal.list(NOW, None)) == 1


async def test_a_stale_etag_refuses_the_write_and_changes_nothing(settings: Settings, server: RadicaleServer) -> None:
    cal = _calendar(settings, server, name="stale")
    start = NOW + timedelta(days=2)
    listed = await cal.create("key-stale", title="Review", starts_at=start, ends_at=start + timedelta(hours=1), now=NOW)
    elsewhere = await cal.update(listed, now=NOW, title="Review (moved by a colleague)")  # another client's change
    with pytest.raises(StaleEvent, match="changed on the calendar server"):
        await cal.update(listed, now=NOW, starts_at=start + timedelta(hours=2), ends_at=start + timedelta(hours=3))
    with pytest.raises(StaleEvent):
        await cal.cancel(listed, now=NOW)
    assert await cal.get(listed.href) == elsewhere  # exactly what the other client left
    # The same change written twice (a retry after a crash): done, not stale.
    moved = await cal.update(elsewhere, now=NOW, title="Review, room 4")
    assert (await cal.update(elsewhere, now=NOW, title="Review, room 4")).title == moved.title


async def test_a_wrong_password_is_a_clear_refusal_that_names_no_secret(
    settings: Settings, server: RadicaleServer
) -> None:
    server.calendar("alice", "login")
    cal = _calendar(settings, server, password="not-the-password", name="login")
    with pytest.raises(AccountRefused) as refused:
        await cal.check()
    assert "password" in str(refused.value) and "not-the-password" not in str(refused.value)
    assert "127.0.0.1" not in str(refused.value) and "alice" not in str(refused.value)
    assert "not-the-password" not in repr(CalDavAccount("https://x/", "alice", "not-the-password"))


async def test_another_users_calendar_is_refused(settings: Settings, server: RadicaleServer) -> None:
    server.calendar("bob", "private")
    http = egress_client(settings.model_copy(update={"egress_allow_networks": ["127.0.0.0/8"]}))
    cal = CalDavCalendar(http, CalDavAccount(f"{server.url}/bob/private/", "alice", _PASSWORD,
                                             plaintext_hosts=frozenset({"127.0.0.1"})), PARIS)
    with pytest.raises(AccountRefused):
        await cal.list(NOW, None)


def test_plain_text_and_other_hosts_are_refused(settings: Settings) -> None:
    http = egress_client(settings)
    with pytest.raises(EgressDenied, match="plaintext_refused"):
        CalDavCalendar(http, CalDavAccount("http://dav.example.com/alice/calendar/", "alice", "pw"), PARIS)
    with pytest.raises(EgressDenied, match="bad_url"):
        CalDavCalendar(http, CalDavAccount("ftp://dav.example.com/", "alice", "pw"), PARIS)


async def test_a_server_that_goes_away_is_transient_and_comes_back(
    settings: Settings, tmp_path: Path
) -> None:
    with radicale(tmp_path / "away", {"alice": _PASSWORD}) as own:
        cal = _calendar(settings, own, name="away")
        start = NOW + timedelta(days=1)
        await cal.create("key-away", title="Standup", starts_at=start, ends_at=start + timedelta(minutes=15), now=NOW)
        own.stop()
        with pytest.raises(Transient):
            await cal.list(NOW, None)
        own.start()
        assert [e.title for e in await cal.list(NOW, None)] == ["Standup"]


async def test_an_event_gone_from_the_server_is_not_found(settings: Settings, server: RadicaleServer) -> None:
    cal = _calendar(settings, server, name="gone")
    with pytest.raises(NotFound):
        await cal.get(cal.url + "no-such-event.ics")
    with pytest.raises(EgressDenied, match="bad_url"):
        await cal.get(f"{server.url}/bob/private/x.ics")  # an address outside the account's calendar
