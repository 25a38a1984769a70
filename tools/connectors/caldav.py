"""A calendar on the owner's own CalDAV server (RFC 4791), through the egress gate.

:class:`CalDavCalendar` lists events by range, reads one, creates, updates and cancels them,
on one calendar collection the owner named. Its contract:

* **Nothing twice.** A new event's UID and address derive from the write's idempotency key, and
  it is created with ``If-None-Match: *``: a write retried after a crash finds its event (412)
  and returns it instead of creating a second.
* **Nothing on a stale approval.** Updates and cancels carry the ETag the event had when it was
  listed (``If-Match``); an event changed since is refused as :class:`StaleEvent`, unchanged.
* **Nothing deleted.** A cancel sets ``STATUS:CANCELLED``; no request here deletes.
* **Secrets stay secret.** The password travels in an ``Authorization`` header only; a refused
  login is :class:`AccountRefused`, whose message names neither the password nor the URL. Plain
  ``http://`` is refused unless the operator allowed plain text for that host.
* **A server that goes away** is :class:`~policies.errors.Transient`: the turn retries what is
  safe to repeat (reads, and updates, which recognise their own change) and says so otherwise.
* **Hostile servers.** Responses are size- and time-capped by the egress gate, XML is parsed
  without DTDs or entities (``defusedxml``), iCalendar with ``icalendar``; an entry that does not
  parse is skipped, and text fields are clipped.

Hand-written over our egress client rather than the ``caldav`` library: that library opens its
own connections (its clients build their own HTTP session and take only a proxy URL, and it can
discover servers through DNS), and every connection of a tool must go through the egress gate
(pinned DNS, allowlist, caps). What is used of the protocol is small: REPORT calendar-query, GET, PUT.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Final
from urllib.parse import urljoin, urlsplit
from xml.etree.ElementTree import Element

from defusedxml import ElementTree as SafeXml
from icalendar import Calendar, Event

from tollgate.tools.perimeter.egress_transport import EgressClient, FetchedResponse
from tollgate.policies.errors import EgressDenied, ErrorCode, NotFound, TollgateError, Unavailable
from tollgate.tools._render import server_text
from tollgate.tools.connectors.errors import AccountRefused, ServerAway

__all__ = ["AccountRefused", "CalDavAccount", "CalDavCalendar", "RemoteEvent", "ServerAway", "StaleEvent"]

_DAV: Final = "{DAV:}"
_CALDAV: Final = "{urn:ietf:params:xml:ns:caldav}"
_UID_NAMESPACE: Final = uuid.UUID("5b7c3e1e-2f0a-4d1b-9a57-7f3c6a1d2e90")  # Tollgate's, for UIDs from idempotency keys
_QUERY: Final = """<?xml version="1.0" encoding="utf-8"?>
<c:calendar-query xmlns:d="DAV:" xmlns:c="urn:ietf:params:xml:ns:caldav">
  <d:prop><d:getetag/><c:calendar-data/></d:prop>
  <c:filter><c:comp-filter name="VCALENDAR"><c:comp-filter name="VEVENT">{range}</c:comp-filter></c:comp-filter></c:filter>
</c:calendar-query>"""


class StaleEvent(TollgateError):
    """The event changed on the server after it was listed: the write did not happen."""

    code: ErrorCode = "approval_invalid"

    def __init__(self) -> None:
        super().__init__("the event changed on the calendar server since it was listed; nothing was changed, "
                         "list it again to see it as it is now")


@dataclass(frozen=True, slots=True)
class CalDavAccount:
    """One owner's calendar collection and login."""

    calendar_url: str
    """The calendar collection, e.g. ``https://dav.example.com/alice/calendar/`` (a trailing slash is added)."""
    username: str
    password: str
    plaintext_hosts: frozenset[str] = frozenset()
    """Hosts the operator allows over plain ``http://`` (a test server on loopback, a LAN box)."""
    private_network: bool = False
    """The operator allowed this account's server on a LAN (``TOLLGATE_CONNECTOR_PRIVATE_NETWORKS``)."""

    def __repr__(self) -> str:  # the password never reaches a log through a repr
        return f"CalDavAccount(calendar_url={self.calendar_url!r}, username={self.username!r}, password='***')"


@dataclass(frozen=True, slots=True)
class RemoteEvent:
    """An event as the server holds it."""

    href: str
    """Its address on the server."""
    etag: str
    """Its version; writes are conditional on it."""
    uid: str
    title: str
    starts_at: datetime
    ends_at: datetime
    location: str = ""
    description: str = ""
    status: str = "CONFIRMED"
    """``CONFIRMED``, ``TENTATIVE`` or ``CANCELLED``."""



def _aware(value: date | datetime, zone: tzinfo) -> datetime:
    """A DTSTART/DTEND as an aware datetime: floating times and all-day dates in the owner's zone."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=zone)
    return datetime.combine(value, time(), tzinfo=zone)


def _events_of(ics: bytes, href: str, etag: str, zone: tzinfo) -> list[RemoteEvent]:
    """The VEVENTs of one calendar object; ``[]`` for one that does not parse."""
    try:
        calendar = Calendar.from_ical(ics)
    except (ValueError, KeyError, IndexError):
        return []
    out = []
    for component in calendar.walk("VEVENT"):
        try:
            start = _aware(component.decoded("DTSTART"), zone)
            end = _aware(component.decoded("DTEND"), zone) if component.get("DTEND") else start + timedelta(hours=1)
        except (KeyError, ValueError, TypeError):
            continue
        out.append(RemoteEvent(
            href=href, etag=etag, uid=server_text(component.get("UID")), title=server_text(component.get("SUMMARY")),
            starts_at=start, ends_at=end, location=server_text(component.get("LOCATION")),
            description=server_text(component.get("DESCRIPTION")),
            status=str(component.get("STATUS") or "CONFIRMED").upper()[:16],
        ))
    return out


def _ics(event: RemoteEvent, now: datetime) -> bytes:
    calendar = Calendar()
    calendar.add("prodid", "-//Tollgate//calendar connector//EN")
    calendar.add("version", "2.0")
    vevent = Event()
    vevent.add("uid", event.uid)
    vevent.add("dtstamp", now.astimezone(UTC))
    vevent.add("dtstart", event.starts_at.astimezone(UTC))
    vevent.add("dtend", event.ends_at.astimezone(UTC))
    vevent.add("summary", event.title)
    if event.location:
        vevent.add("location", event.location)
    if event.description:
        vevent.add("description", event.description)
    vevent.add("status", event.status)
    calendar.add_component(vevent)
    return bytes(calendar.to_ical())


def _stamp(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


class CalDavCalendar:
    """One owner's CalDAV calendar, through ``http`` (the egress gate), allowed its server only."""

    def __init__(self, http: EgressClient, account: CalDavAccount, zone: tzinfo) -> None:
        url = account.calendar_url if account.calendar_url.endswith("/") else account.calendar_url + "/"
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EgressDenied("bad_url")
        if parts.scheme == "http" and parts.hostname not in account.plaintext_hosts:
            raise EgressDenied("plaintext_refused")  # a password over plain text is refused by default
        self.url = url
        self.zone = zone
        self._http = http.for_hosts(parts.netloc, private_network=account.private_network)
        login = f"{account.username}:{account.password}".encode()
        self._auth = {"Authorization": "Basic " + base64.b64encode(login).decode("ascii")}

    async def _send(self, method: str, url: str, *, body: bytes | None = None, headers: dict[str, str] | None = None,
                    accept: str = "*/*") -> FetchedResponse:
        try:
            response = await self._http.request(method, url, content=body, headers=self._auth | (headers or {}),
                                                accept=accept)
        except Unavailable:
            # The server went away (or is restarting): the call that can be repeated safely is retried.
            raise ServerAway() from None
        if response.status in (401, 403):
            raise AccountRefused()
        if response.status >= 500:
            raise ServerAway()
        return response

    def _href(self, value: str) -> str:
        """A server href as an absolute URL under this calendar; anything else is refused."""
        absolute = urljoin(self.url, value)
        if not absolute.startswith(self.url):
            raise EgressDenied("bad_url")  # a server naming an address outside the calendar
        return absolute

    async def check(self) -> None:
        """Log in and read the collection once: :class:`AccountRefused` for a bad login,
        :class:`NotFound` when the address is not a calendar."""
        response = await self._send("PROPFIND", self.url, body=b'<?xml version="1.0"?><d:propfind xmlns:d="DAV:">'
                                    b"<d:prop><d:resourcetype/></d:prop></d:propfind>",
                                    headers={"Depth": "0", "Content-Type": "application/xml; charset=utf-8"})
        if response.status != 207 or b"calendar" not in response.body:
            raise NotFound("calendar", urlsplit(self.url).path)

    async def list(self, start: datetime, end: datetime | None = None) -> list[RemoteEvent]:
        """Events overlapping ``[start, end)`` (open end: ``None``), earliest first."""
        window = f'<c:time-range start="{_stamp(start)}"' + (f' end="{_stamp(end)}"/>' if end else "/>")
        response = await self._send("REPORT", self.url, body=_QUERY.format(range=window).encode(),
                                    headers={"Depth": "1", "Content-Type": "application/xml; charset=utf-8"},
                                    accept="application/xml")
        if response.status != 207:
            raise Unavailable("calendar server")
        events = [e for href, etag, ics in self._multistatus(response.body) for e in _events_of(ics, href, etag, self.zone)]
        return sorted(events, key=lambda e: (e.starts_at, e.href))

    def _multistatus(self, body: bytes) -> Iterable[tuple[str, str, bytes]]:
        try:
            root: Element = SafeXml.fromstring(body)
        except SafeXml.ParseError:
            raise Unavailable("calendar server") from None
        for item in root.iter(f"{_DAV}response"):
            href = item.findtext(f"{_DAV}href") or ""
            etag = item.findtext(f".//{_DAV}getetag") or ""
            data = item.findtext(f".//{_CALDAV}calendar-data") or ""
            if href and etag and data:
                yield self._href(href), etag, data.encode()

    async def get(self, href: str) -> RemoteEvent:
        """The event at ``href``; :class:`NotFound` when it is gone."""
        response = await self._send("GET", self._href(href), accept="text/calendar")
        if response.status == 404:
            raise NotFound("event", urlsplit(href).path.rsplit("/", 1)[-1])
        events = _events_of(response.body, self._href(href), response.etag or "", self.zone)
        if response.status != 200 or not events:
            raise Unavailable("calendar server")
        return events[0]

    async def created(self, key: str) -> RemoteEvent | None:
        """The event write ``key`` created, if it exists (reads only: for reconciling a create)."""
        try:
            return await self.get(self._href(f"{uuid.uuid5(_UID_NAMESPACE, key)}.ics"))
        except NotFound:
            return None

    async def create(self, key: str, *, title: str, starts_at: datetime, ends_at: datetime, location: str = "",
                     description: str = "", now: datetime) -> RemoteEvent:
        """Create the event of write ``key`` once: a retry finds the one it created."""
        uid = str(uuid.uuid5(_UID_NAMESPACE, key))
        href = self._href(f"{uid}.ics")
        event = RemoteEvent(href=href, etag="", uid=uid, title=title, starts_at=starts_at, ends_at=ends_at,
                            location=location, description=description)
        response = await self._send("PUT", href, body=_ics(event, now),
                                    headers={"If-None-Match": "*", "Content-Type": "text/calendar; charset=utf-8"})
        if response.status == 412:
            return await self.get(href)  # made by an earlier attempt of the same write
        if response.status not in (200, 201, 204):
            raise Unavailable("calendar server")
        return await self.get(href)

    async def update(self, current: RemoteEvent, *, now: datetime, **changes: object) -> RemoteEvent:
        """Write ``current`` with ``changes`` if the server still has it as listed (its ETag).

        A retry after a crash that already wrote the same change is the change done: the server
        holds exactly what was asked, so it is returned. Anything else changed since is
        :class:`StaleEvent`.
        """
        wanted = replace(current, **changes)  # type: ignore[arg-type]
        response = await self._send("PUT", current.href, body=_ics(wanted, now),
                                    headers={"If-Match": current.etag, "Content-Type": "text/calendar; charset=utf-8"})
        if response.status == 412:
            now_held = await self.get(current.href)
            if _same(now_held, wanted):
                return now_held
            raise StaleEvent()
        if response.status == 404:
            raise NotFound("event", current.uid)
        if response.status not in (200, 201, 204):
            raise Unavailable("calendar server")
        return await self.get(current.href)

    async def cancel(self, current: RemoteEvent, *, now: datetime) -> RemoteEvent:
        """Mark the event cancelled (never deleted), on the same terms as :meth:`update`."""
        return await self.update(current, now=now, status="CANCELLED")


def _same(held: RemoteEvent, wanted: RemoteEvent) -> bool:
    return (held.uid, held.title, held.starts_at, held.ends_at, held.location, held.description, held.status) == (
        wanted.uid, wanted.title, wanted.starts_at, wanted.ends_at, wanted.location, wanted.description, wanted.status)
