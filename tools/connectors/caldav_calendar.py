"""The calendar tool on an owner's CalDAV server: the same actions, another :class:`EventStore`.

:func:`calendar_for` is the calendar tool for a deployment's settings: each call asks which
backend its owner uses (``TOLLGATE_CALENDAR_BACKEND``, per owner in
``TOLLGATE_CALENDAR_BACKEND_OWNERS``; Tollgate's own table by default) and runs the same
executors and previews on that store, so summaries, previews, approvals and the honesty of
replies are the built-in tool's. The choice is a setting, not a lookup, so an owner on the
built-in table pays no query for it.

An event's id is its server address hashed with the version it was listed at
(``cdv_<address>_<version>``): an approval binds the version the owner saw, and a write to an
event changed since is refused (:class:`~tools.connectors.caldav.StaleEvent`). Writes are safe to
repeat after a crash (the connector's contract), so they run in the call's transaction like the
built-in's: a retry of the same write finds what the first attempt did.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from policies.errors import ErrorCode, NotFound, TollgateError, Unavailable
from tools import calendar as builtin
from tools.calendar import CALENDAR, TABLE, EventStore
from tools.connectors.caldav import CalDavAccount, CalDavCalendar, RemoteEvent, StaleEvent
from tools._render import zone
from tools.connectors.backends import backend_of, backends_chosen, on_stores
from tools.registry import ExecContext, ToolSpec

__all__ = ["ACCOUNT_NAMES", "AccountMissing", "CalDavEvents", "calendar_for"]

ACCOUNT_NAMES: Final = ("caldav_url", "caldav_username", "caldav_password")
"""The calendar tool's credentials (``tollgate account add``) that make an owner's CalDAV account."""
_LOOK_BACK: Final = timedelta(days=400)  # how far back an event listed earlier is looked for


class AccountMissing(TollgateError):
    """The owner's calendar is set to CalDAV but no account is connected."""

    code: ErrorCode = "unavailable"

    def __init__(self) -> None:
        super().__init__("no calendar account is connected yet (tollgate account add --kind caldav)")


def _hash(value: str, chars: int) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:chars]


def _event_id(event: RemoteEvent) -> str:
    return f"cdv_{_hash(event.href, 20)}_{_hash(event.etag, 8)}"


def _row(event: RemoteEvent) -> dict[str, Any]:
    return {"id": _event_id(event), "title": event.title, "starts_at": event.starts_at, "ends_at": event.ends_at,
            "location": event.location, "description": event.description,
            "status": "cancelled" if event.status == "CANCELLED" else "confirmed", "remote": event}


def _contains(event: RemoteEvent, text: str | None) -> bool:
    if not text:
        return True
    needle = text.lower()
    return any(needle in field.lower() for field in (event.title, event.location, event.description))


class CalDavEvents:
    """An :class:`~tools.calendar.EventStore` on one owner's CalDAV calendar."""

    def __init__(self, calendar: CalDavCalendar) -> None:
        self.calendar = calendar

    async def load(self, ctx: ExecContext, event_id: str, *, lock: bool = False) -> dict[str, Any]:
        place, _, version = event_id.removeprefix("cdv_").partition("_")
        for event in await self.calendar.list(ctx.now - _LOOK_BACK, None):
            if _hash(event.href, 20) == place:
                if _hash(event.etag, 8) != version:
                    raise StaleEvent()
                return _row(event)
        raise NotFound("calendar event", event_id)

    async def window(self, ctx: ExecContext, start: datetime, end: datetime | None, contains: str | None,
                     limit: int) -> list[dict[str, Any]]:
        events = [e for e in await self.calendar.list(start, end) if e.status != "CANCELLED" and _contains(e, contains)]
        return [_row(e) for e in events[:limit]]

    async def overlaps(self, ctx: ExecContext, start: datetime, end: datetime, skip: str = "") -> list[dict[str, Any]]:
        rows = [_row(e) for e in await self.calendar.list(start, end) if e.status != "CANCELLED"]
        return [r for r in rows if r["id"] != skip][:3]

    async def insert(self, ctx: ExecContext, title: str, start: datetime, end: datetime, location: str) -> dict[str, Any]:
        if ctx.idempotency_key is None:
            raise Unavailable("a write without its idempotency key")  # every approved write has one
        return _row(await self.calendar.create(ctx.idempotency_key, title=title, starts_at=start, ends_at=end,
                                               location=location, now=ctx.now))

    async def change(self, ctx: ExecContext, row: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
        return _row(await self.calendar.update(row["remote"], now=ctx.now, title=new["title"],
                                               starts_at=new["starts_at"], ends_at=new["ends_at"],
                                               location=new["location"]))

    async def cancel(self, ctx: ExecContext, row: dict[str, Any]) -> dict[str, Any] | None:
        return _row(await self.calendar.cancel(row["remote"], now=ctx.now))


def calendar_for(settings: Mapping[str, Any] | None) -> ToolSpec:
    """The calendar tool for ``settings``: the built-in one unless some owner is on CalDAV."""
    values = settings or {}
    if backends_chosen(values, "calendar") == {"builtin"}:
        return CALENDAR
    plaintext = frozenset(str(h) for h in values.get("connector_plaintext_hosts") or ())

    async def store_for(ctx: ExecContext) -> EventStore:
        if backend_of(values, "calendar", ctx.owner_id) != "caldav":
            return TABLE
        if ctx.credentials is None or ctx.http is None:
            raise AccountMissing()
        url, username, password = [await ctx.credentials.get(name) for name in ACCOUNT_NAMES]
        if not (url and username and password):
            raise AccountMissing()
        account = CalDavAccount(url, username, password, plaintext)
        return CalDavEvents(CalDavCalendar(ctx.http, account, zone(ctx.timezone)))

    runs = {"list": builtin.list_events, "get": builtin.get_event, "create": builtin.create_event,
            "update": builtin.update_event, "cancel_event": builtin.cancel_event}
    previews = {"create": builtin.preview_create, "update": builtin.preview_update, "cancel_event": builtin.preview_cancel}
    return on_stores(CALENDAR, store_for, runs, previews)
