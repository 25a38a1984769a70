"""The calendar tool on an owner's CalDAV server: the same actions, another :class:`EventStore`.

:func:`calendar_for` is the calendar tool for a deployment's settings: each call asks which
backend its owner uses (``TOLLGATE_CALENDAR_BACKEND``, per owner in
``TOLLGATE_CALENDAR_BACKEND_OWNERS``; Tollgate's own table by default) and runs the same
executors and previews on that store (:func:`tools.connectors.backends.on_stores`), so summaries,
previews, approvals and the honesty of replies are the built-in tool's.

An event's id is its name on the server (``cdv_<name>_<version>``, read back with one GET; an
address too long or odd for an id is hashed, ``cdh_<hash>_<version>``, and found by listing) with
a hash of the version it was listed at: an approval binds the version the owner saw, and a write
to an event changed since is refused (:class:`~tools.connectors.caldav.StaleEvent`).

For an owner on CalDAV the writes are remote writes (``ActionSpec.remote_for``): the intent is
committed before the server is touched and the outcome after. After a crash in between, the
``reconcile`` hooks read the server (the create's UID, the cancel's status, the update's values),
so what happened is recorded as done and what did not as not done; nothing is written again.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from tollgate.policies.errors import ErrorCode, NotFound, TollgateError, Unavailable
from tollgate.tools import calendar as builtin
from tollgate.tools.calendar import CALENDAR, TABLE, EventStore
from tollgate.tools.connectors.caldav import CalDavAccount, CalDavCalendar, RemoteEvent, StaleEvent
from tollgate.tools._render import quoted, write_result, zone
from tollgate.tools.args import CalendarCancelArgs, CalendarCreateArgs, CalendarUpdateArgs
from tollgate.tools.connectors.backends import backend_of, backends_chosen, on_stores, private_network_owners
from tollgate.tools.registry import ExecContext, IdKind, Reconciled, ToolSpec

__all__ = ["ACCOUNT_NAMES", "CALDAV_EVENT", "AccountMissing", "CalDavEvents", "calendar_for"]

ACCOUNT_NAMES: Final = ("caldav_url", "caldav_username", "caldav_password")
"""The calendar tool's credentials (``tollgate account add``) that make an owner's CalDAV account."""
_LOOK_BACK: Final = timedelta(days=400)  # how far back an event with a hashed id is looked for
_PLAIN_NAME: Final = re.compile(r"[A-Za-z0-9-]{1,48}")  # what fits an id as it is (a UUID does)
CALDAV_EVENT: Final = IdKind("caldav_event", pattern=r"cd[vh]_[A-Za-z0-9-]{1,48}_[0-9a-f]{8}", noun="calendar")
"""The ids of events on an owner's CalDAV server (:func:`_event_id`): for that owner the calendar
tool's id fields bind these, never the built-in ``calendar`` ids."""


class AccountMissing(TollgateError):
    """The owner's calendar is set to CalDAV but no account is connected."""

    code: ErrorCode = "unavailable"

    def __init__(self) -> None:
        super().__init__("no calendar account is connected yet (tollgate account add --kind caldav)")


def _hash(value: str, chars: int) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:chars]


def _event_id(calendar: CalDavCalendar, event: RemoteEvent) -> str:
    """``cdv_<name>_<version>`` for an event stored as ``<name>.ics`` with a short plain name (found
    again with one GET), else ``cdh_<hash of its address>_<version>`` (found again by listing)."""
    name = event.href.removeprefix(calendar.url).removesuffix(".ics")
    if _PLAIN_NAME.fullmatch(name) and event.href == f"{calendar.url}{name}.ics":
        return f"cdv_{name}_{_hash(event.etag, 8)}"
    return f"cdh_{_hash(event.href, 20)}_{_hash(event.etag, 8)}"


def _row(calendar: CalDavCalendar, event: RemoteEvent) -> dict[str, Any]:
    return {"id": _event_id(calendar, event), "title": event.title, "starts_at": event.starts_at, "ends_at": event.ends_at,
            "location": event.location, "description": event.description,
            "status": "cancelled" if event.status == "CANCELLED" else "confirmed", "remote": event}


def _contains(event: RemoteEvent, text: str | None) -> bool:
    if not text:
        return True
    needle = text.lower()
    return any(needle in field.lower() for field in (event.title, event.location, event.description))


class CalDavEvents:
    """An :class:`~tools.calendar.EventStore` on one owner's CalDAV calendar."""

    id_kind = CALDAV_EVENT.name

    def __init__(self, calendar: CalDavCalendar) -> None:
        self.calendar = calendar

    async def load(self, ctx: ExecContext, event_id: str, *, lock: bool = False) -> dict[str, Any]:
        row, same = await self.now_held(ctx, event_id)
        if row is None:
            raise NotFound("calendar event", event_id)
        if not same:
            raise StaleEvent()
        return row

    async def now_held(self, ctx: ExecContext, event_id: str) -> tuple[dict[str, Any] | None, bool]:
        """The event ``event_id`` names as the server holds it now, and whether it is still the version listed."""
        kind, place, version = (event_id.split("_") + ["", "", ""])[:3]
        if kind == "cdv" and _PLAIN_NAME.fullmatch(place):
            try:
                event = await self.calendar.get(f"{self.calendar.url}{place}.ics")
            except NotFound:
                return None, False
            return _row(self.calendar, event), _hash(event.etag, 8) == version
        for event in await self.calendar.list(ctx.now - _LOOK_BACK, None):
            if _hash(event.href, 20) == place:
                return _row(self.calendar, event), _hash(event.etag, 8) == version
        return None, False

    async def window(self, ctx: ExecContext, start: datetime, end: datetime | None, contains: str | None,
                     limit: int) -> list[dict[str, Any]]:
        events = [e for e in await self.calendar.list(start, end) if e.status != "CANCELLED" and _contains(e, contains)]
        return [_row(self.calendar, e) for e in events[:limit]]

    async def overlaps(self, ctx: ExecContext, start: datetime, end: datetime, skip: str = "") -> list[dict[str, Any]]:
        rows = [_row(self.calendar, e) for e in await self.calendar.list(start, end) if e.status != "CANCELLED"]
        return [r for r in rows if r["id"] != skip][:3]

    async def insert(self, ctx: ExecContext, title: str, start: datetime, end: datetime, location: str) -> dict[str, Any]:
        if ctx.idempotency_key is None:
            raise Unavailable("a write without its idempotency key")  # every approved write has one
        created = await self.calendar.create(ctx.idempotency_key, title=title, starts_at=start, ends_at=end,
                                             location=location, now=ctx.now)
        return _row(self.calendar, created)

    async def change(self, ctx: ExecContext, row: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
        changed = await self.calendar.update(row["remote"], now=ctx.now, title=new["title"],
                                             starts_at=new["starts_at"], ends_at=new["ends_at"], location=new["location"])
        return _row(self.calendar, changed)

    async def cancel(self, ctx: ExecContext, row: dict[str, Any]) -> dict[str, Any] | None:
        return _row(self.calendar, await self.calendar.cancel(row["remote"], now=ctx.now))


async def _reconcile_create(ctx: ExecContext, args: CalendarCreateArgs, store: CalDavEvents) -> Reconciled:
    """The event of the write's key exists: done. It does not: not done."""
    found = await store.calendar.created(ctx.idempotency_key or "")
    if found is None:
        return Reconciled.not_done()
    return Reconciled.done(builtin.created_result(ctx, _row(store.calendar, found), store.id_kind))


async def _reconcile_cancel(ctx: ExecContext, args: CalendarCancelArgs, store: CalDavEvents) -> Reconciled:
    """Cancelled now: done. Still the version approved: not done. Changed otherwise: unknown."""
    row, same = await store.now_held(ctx, args.event_id)
    if row is not None and row["status"] == "cancelled":
        return Reconciled.done(builtin.cancelled_result(ctx, row, store.id_kind))
    return Reconciled.not_done() if same else Reconciled.unknown()


async def _reconcile_update(ctx: ExecContext, args: CalendarUpdateArgs, store: CalDavEvents) -> Reconciled:
    """Still the version approved: not done. Holding every value asked for: done. Otherwise: unknown."""
    row, same = await store.now_held(ctx, args.event_id)
    if row is None or same:
        return Reconciled.not_done() if same else Reconciled.unknown()
    asked = {"title": args.title, "starts_at": args.start, "location": args.location}
    held = all(value is None or row[name] == value for name, value in asked.items()) and (
        args.duration_minutes is None or row["ends_at"] - row["starts_at"] == timedelta(minutes=args.duration_minutes))
    if not held:
        return Reconciled.unknown()
    summary = f"Updated {quoted(row['title'])}."
    return Reconciled.done(write_result("calendar", "update", builtin.event_item(row, ctx.timezone), 1, summary,
                                        id_kind=store.id_kind))


def calendar_for(settings: Mapping[str, Any] | None) -> ToolSpec:
    """The calendar tool for ``settings``: the built-in one unless some owner is on CalDAV."""
    values = settings or {}
    if backends_chosen(values, "calendar") == {"builtin"}:
        return CALENDAR
    plaintext = frozenset(str(h) for h in values.get("connector_plaintext_hosts") or ())
    on_lan = private_network_owners(values, "caldav")

    async def store_for(ctx: ExecContext) -> EventStore:
        if backend_of(values, "calendar", ctx.owner_id) != "caldav":
            return TABLE
        if ctx.credentials is None or ctx.http is None:
            raise AccountMissing()
        url, username, password = [await ctx.credentials.get(name) for name in ACCOUNT_NAMES]
        if not (url and username and password):
            raise AccountMissing()
        account = CalDavAccount(url, username, password, plaintext, private_network=ctx.owner_id in on_lan)
        return CalDavEvents(CalDavCalendar(ctx.http, account, zone(ctx.timezone)))

    def on_caldav(owner_id: str) -> bool:
        return backend_of(values, "calendar", owner_id) == "caldav"

    hooks = {"create": _reconcile_create, "update": _reconcile_update, "cancel_event": _reconcile_cancel}
    runs = {"list": builtin.list_events, "get": builtin.get_event, "create": builtin.create_event,
            "update": builtin.update_event, "cancel_event": builtin.cancel_event}
    previews = {"create": builtin.preview_create, "update": builtin.preview_update, "cancel_event": builtin.preview_cancel}
    return on_stores(CALENDAR, store_for, runs, previews, on_server=on_caldav, kind=CALDAV_EVENT, hooks=hooks)
