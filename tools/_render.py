"""Shared helpers of the built-in tools: owner-local time formatting, labels, results, SQL reads.

Dates and times are formatted with fixed English names (never the process locale) in the
owner's timezone. Labels collapse whitespace and are clipped, so a hostile subject line cannot
break a numbered list into extra lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import Any, LiteralString
from zoneinfo import ZoneInfo

from psycopg.rows import dict_row

from tollgate.policies.errors import NotFound
from tollgate.tools.registry import ActionResult, ExecContext, ResultRow

__all__ = [
    "clip",
    "count_summary",
    "escape_like",
    "fetch_all",
    "fetch_one",
    "fmt_day",
    "fmt_duration",
    "fmt_span",
    "fmt_time",
    "fmt_when",
    "item_result",
    "jsonable",
    "list_result",
    "load_owned",
    "local",
    "plural",
    "quoted",
    "render_list",
    "render_summary",
    "write_result",
    "zone",
]

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@lru_cache(maxsize=64)
def zone(name: str) -> ZoneInfo:
    """The ``ZoneInfo`` for an IANA name (cached)."""
    return ZoneInfo(name)


def local(value: datetime, tz: str) -> datetime:
    """``value`` converted to the owner's timezone."""
    return value.astimezone(zone(tz))


def fmt_day(value: date | datetime, tz: str | None = None) -> str:
    """``Mon 30 Nov`` (a datetime is first converted to ``tz``)."""
    if isinstance(value, datetime):
        value = local(value, tz or "UTC").date()
    return f"{_DAYS[value.weekday()]} {value.day} {_MONTHS[value.month - 1]}"


def fmt_time(value: datetime, tz: str) -> str:
    """``09:00`` in the owner's timezone."""
    return f"{local(value, tz):%H:%M}"


def fmt_when(value: datetime, tz: str) -> str:
    """``Mon 30 Nov, 09:00`` in the owner's timezone."""
    return f"{fmt_day(value, tz)}, {fmt_time(value, tz)}"


def fmt_span(start: datetime, end: datetime, tz: str) -> str:
    """``Mon 30 Nov, 09:00–09:15``; a span across days names both days."""
    if local(start, tz).date() == local(end, tz).date():
        return f"{fmt_when(start, tz)}–{fmt_time(end, tz)}"
    return f"{fmt_when(start, tz)} – {fmt_when(end, tz)}"


def fmt_duration(minutes: int) -> str:
    """``45 minutes``, ``1 hour``, ``1 hour 30 minutes``, ``2 days``."""
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    parts = [plural(n, unit) for n, unit in ((days, "day"), (hours, "hour"), (mins, "minute")) if n]
    return " ".join(parts) or "0 minutes"


def plural(count: int, singular: str, many: str | None = None) -> str:
    """``1 event``, ``3 events``."""
    return f"{count} {singular if count == 1 else (many or singular + 's')}"


def count_summary(rows: list[Any], limit: int, noun: str, *, order: str = "first") -> tuple[list[Any], str]:
    """The rows to show of a ``LIMIT limit + 1`` query and the grounded sentence counting them.

    The one extra row says honestly that there are more than ``limit``.
    """
    shown = rows[:limit]
    if not shown:
        return shown, f"You have no {noun}s."
    if len(rows) > limit:
        return shown, f"You have more than {plural(limit, noun)}; here are the {order} {limit}."
    return shown, f"You have {plural(len(shown), noun)}."


def clip(text: str, limit: int = 80) -> str:
    """``text`` on one line (whitespace collapsed), clipped to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def server_text(value: object, limit: int = 500) -> str:
    """A field a remote server sent (a subject, a location), as text: NUL-free and at most ``limit``
    characters, whitespace kept (the renderers clip it again for display)."""
    return str(value or "").replace("\x00", "")[:limit]


def quoted(text: str, limit: int = 80) -> str:
    """``“text”``, on one line and clipped."""
    return f"“{clip(text, limit)}”"


def escape_like(text: str) -> str:
    """``text`` with LIKE wildcards and the escape character escaped (for ``ESCAPE '\\'``)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def jsonable(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row with JSON-safe values: datetimes and dates as ISO strings, sequences as lists."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, (datetime, date)):
            out[key] = value.isoformat()
        elif isinstance(value, timedelta):
            out[key] = int(value.total_seconds() // 60)
        elif isinstance(value, (list, tuple)):
            out[key] = list(value)
        else:
            out[key] = value
    return out


def list_result(tool: str, action: str, list_kind: str, rows: Iterable[ResultRow], summary: str) -> ActionResult:
    """A list result (it replaces the thread's recent list of ``list_kind``)."""
    return {
        "tool": tool,
        "action": action,
        "kind": "list",
        "summary": summary,
        "rows": list(rows),
        "list_kind": list_kind,
    }


def _with_kind(result: ActionResult, item: Mapping[str, Any], id_kind: str) -> ActionResult:
    if isinstance(item.get("id"), str):
        result["item_kind"] = id_kind
    return result


def item_result(tool: str, action: str, item: Mapping[str, Any], summary: str, *,
                id_kind: str | None = None) -> ActionResult:
    """A single-item read; an item with an ``id`` makes it bindable (kind: ``id_kind``, else the tool's name)."""
    return _with_kind({"tool": tool, "action": action, "kind": "item", "summary": summary, "item": jsonable(item)},
                      item, id_kind or tool)


def write_result(tool: str, action: str, item: Mapping[str, Any], changed: int, summary: str, *,
                 id_kind: str | None = None) -> ActionResult:
    """A write: the item as it now is (bindable, like :func:`item_result`'s) and how many items really changed."""
    return _with_kind({
        "tool": tool,
        "action": action,
        "kind": "write",
        "summary": summary,
        "item": jsonable(item),
        "changed": changed,
    }, item, id_kind or tool)


def render_list(result: ActionResult) -> str:
    """The summary, then ``1. label`` per row; an empty list is just its summary."""
    rows = result.get("rows") or []
    if not rows:
        return result["summary"]
    head = result["summary"]
    head = head[:-1] + ":" if head.endswith(".") else head
    return head + "\n" + "\n".join(f"{i}. {row['label']}" for i, row in enumerate(rows, 1))


def render_summary(result: ActionResult) -> str:
    """A write's reply: its summary, which states exactly what changed."""
    return result["summary"]


async def fetch_all(ctx: ExecContext, sql: LiteralString, params: Sequence[Any]) -> list[dict[str, Any]]:
    """Every row of ``sql`` on the call's connection, as dicts."""
    async with ctx.db.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql, params)
        return await cur.fetchall()


async def fetch_one(ctx: ExecContext, sql: LiteralString, params: Sequence[Any]) -> dict[str, Any] | None:
    """The first row of ``sql`` on the call's connection, or ``None``."""
    async with ctx.db.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql, params)
        return await cur.fetchone()


async def load_owned(
    ctx: ExecContext, table: LiteralString, columns: LiteralString, kind: str, item_id: str, *, lock: bool = False
) -> dict[str, Any]:
    """The owner's row ``item_id`` of ``table`` (locked for the transaction with ``lock``).

    Raises :class:`~policies.errors.NotFound` when the owner has no such item; another owner's
    item is indistinguishable from none.
    """
    sql = f"SELECT {columns} FROM {table} WHERE owner_id = %s AND id = %s"
    row = await fetch_one(ctx, sql + (" FOR UPDATE" if lock else ""), (ctx.owner_id, item_id))
    if row is None:
        raise NotFound(kind, item_id)
    return row
