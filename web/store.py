"""The queries behind the HTTP routes: threads, transcripts, approvals and the turn event log.

Every read is scoped by owner. A thread or approval of another owner is reported exactly like
a missing one (:class:`~policies.errors.NotFound`), so its existence never leaks.
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import orjson

from tollgate.graph.events import TurnEvent
from tollgate.graph.store import owner_scope
from tollgate.graph.store.db import Database
from tollgate.graph.threads import ThreadKind, thread_kind
from tollgate.policies.errors import NotFound
from tollgate.tools._render import escape_like
from tollgate.web.schemas import DecidedApprovalOut, MessageOut, ThreadStatus, ThreadSummary

__all__ = [
    "TERMINAL",
    "ApprovalRef",
    "OwnedThreads",
    "ThreadRow",
    "approval_history",
    "create_thread",
    "delete_thread",
    "ends_run",
    "event_json",
    "events_after",
    "first_event_id",
    "latest_event",
    "list_threads",
    "record_events",
    "rename_thread",
    "require_approval",
    "require_thread",
    "thread_status",
    "title_thread",
    "transcript",
]

_TITLE_CHARS: Final = 80

TERMINAL: Final = frozenset({"message_complete", "approval_required"})
"""Event types that end a run that completed."""


def ends_run(event: TurnEvent) -> bool:
    """Whether ``event`` is the last of its run: a terminal event, or the fatal error of a failed run."""
    return event["type"] in TERMINAL or (event["type"] == "error" and event["data"].get("fatal") is True)


@dataclass(frozen=True, slots=True)
class ThreadRow:
    """A thread the caller owns."""

    thread_id: str
    """The thread id."""
    created_at: datetime
    """When it was created."""
    updated_at: datetime
    """When it last ran."""
    title: str = ""
    """Its title (the first message, or the owner's name for it)."""


@dataclass(frozen=True, slots=True)
class ApprovalRef:
    """An approval the caller owns."""

    approval_id: str
    """Its id."""
    thread_id: str
    """Its thread."""
    tool: str
    """Tool name."""
    action: str
    """Action name."""
    request_id: str = ""
    """The request it belongs to (its first action's id)."""
    names: tuple[str, ...] = ()
    """The function names of the request's actions, in order."""


def _title(message: str) -> str:
    return " ".join(message.split())[:_TITLE_CHARS]


async def create_thread(db: Database, owner_id: str, first_message: str = "") -> str:
    """A new thread for ``owner_id``, with an unguessable server-chosen id, titled by its first message.

    A random UUID (122 random bits), because ``langgraph dev`` addresses threads by UUID: a thread
    started over HTTP can then be opened in Studio. The title is set now, not when the turn ends,
    so a thread whose first turn waits for an approval is never listed by its id.
    """
    thread_id = str(uuid.uuid4())
    async with db.pool.connection() as conn:
        await conn.execute("INSERT INTO threads (thread_id, owner_id, title) VALUES (%s, %s, %s)",
                           (thread_id, owner_id, _title(first_message) or None))
    return thread_id


async def title_thread(db: Database, owner_id: str, thread_id: str, message: str) -> None:
    """Title a thread by ``message`` if it has no title yet (one created by the CLI or Studio)."""
    async with db.pool.connection() as conn:
        await conn.execute("UPDATE threads SET title = %s WHERE thread_id = %s AND owner_id = %s AND title IS NULL",
                           (_title(message) or None, thread_id, owner_id))


async def require_thread(db: Database, owner_id: str, thread_id: str) -> ThreadRow:
    """The caller's thread, or :class:`NotFound` (missing, foreign and deleted look the same)."""
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT thread_id, created_at, updated_at, coalesce(title, '') AS title FROM threads"
            " WHERE thread_id = %s AND owner_id = %s AND deleted_at IS NULL",
            (thread_id, owner_id),
        )
        row = await cur.fetchone()
    if row is None:
        raise NotFound("thread", thread_id)
    return ThreadRow(thread_id=row["thread_id"], created_at=row["created_at"], updated_at=row["updated_at"],
                     title=row["title"])


async def rename_thread(db: Database, owner_id: str, thread_id: str, title: str) -> None:
    """Give the caller's thread a title (empty: back to its first message); :class:`NotFound` if not theirs."""
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            """UPDATE threads SET title = coalesce(nullif(%(title)s, ''),
                                                   (SELECT left(content, 80) FROM transcript
                                                    WHERE thread_id = %(thread)s AND role = 'user' ORDER BY id LIMIT 1))
               WHERE thread_id = %(thread)s AND owner_id = %(owner)s AND deleted_at IS NULL RETURNING thread_id""",
            {"title": _title(title), "thread": thread_id, "owner": owner_id},
        )
        if await cur.fetchone() is None:
            raise NotFound("thread", thread_id)


async def delete_thread(db: Database, owner_id: str, thread_id: str) -> None:
    """Hide the caller's thread from their lists and reads (soft: its audit trail stays); :class:`NotFound` if not theirs.

    Its pending approvals are superseded first, so nothing it waited on can run later.
    """
    async with owner_scope.owner_transaction(db.pool, owner_id) as conn:
        cur = await conn.execute(
            "UPDATE threads SET deleted_at = now() WHERE thread_id = %s AND owner_id = %s AND deleted_at IS NULL"
            " RETURNING thread_id",
            (thread_id, owner_id),
        )
        if await cur.fetchone() is None:
            raise NotFound("thread", thread_id)
        await conn.execute(
            "UPDATE approvals SET status = 'superseded', decided_at = now(), finished_at = now(), error_code = 'deleted'"
            " WHERE thread_id = %s AND status = 'pending'",
            (thread_id,),
        )


async def approval_history(db: Database, owner_id: str, thread_id: str, limit: int = 50) -> list[DecidedApprovalOut]:
    """The approvals of ``owner_id``'s thread that are no longer pending, newest first: what was
    asked and what became of it."""
    async with owner_scope.owner_reads(db.pool, owner_id) as conn:
        cur = await conn.execute(
            """SELECT approval_id, request_id, tool, action, preview, status, decision, decided_via, owner_id,
                      created_at, decided_at, error_code
               FROM approvals WHERE thread_id = %s AND status <> 'pending'
               ORDER BY created_at DESC, position DESC LIMIT %s""",
            (thread_id, limit),
        )
        rows = await cur.fetchall()
    return [DecidedApprovalOut(**row) for row in rows]


class OwnedThreads:
    """The threads this process has seen belong to their owner, so a request needs no query for them.

    A thread's owner is set once, when it is claimed, and never changes (threads are not handed
    over); a deleted thread is forgotten by the process that deletes it. Only positive answers are
    kept; a thread not remembered is looked up (:func:`require_thread`). The turn checks ownership
    (and that the thread is not deleted) again under the thread's lease before it runs anything;
    this only saves the early check's query.
    """

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._known: OrderedDict[tuple[str, str], None] = OrderedDict()

    def forget(self, owner_id: str, thread_id: str) -> None:
        """Drop a thread its owner deleted."""
        self._known.pop((owner_id, thread_id), None)

    def remember(self, owner_id: str, thread_id: str) -> None:
        """Note that ``thread_id`` belongs to ``owner_id`` (the least recently used beyond ``size`` go)."""
        key = (owner_id, thread_id)
        self._known[key] = None
        self._known.move_to_end(key)
        while len(self._known) > self.size:
            self._known.popitem(last=False)

    async def require(self, db: Database, owner_id: str, thread_id: str) -> None:
        """Return if ``thread_id`` is the caller's; else :class:`NotFound`."""
        key = (owner_id, thread_id)
        if key in self._known:
            self._known.move_to_end(key)
            return
        await require_thread(db, owner_id, thread_id)
        self.remember(owner_id, thread_id)


async def require_approval(db: Database, owner_id: str, approval_id: str) -> ApprovalRef:
    """The caller's approval (any status), or :class:`NotFound`."""
    async with owner_scope.owner_reads(db.pool, owner_id) as conn:
        cur = await conn.execute(
            """SELECT a.approval_id, a.thread_id, a.tool, a.action, a.request_id,
                      (SELECT array_agg(r.tool || '__' || r.action ORDER BY r.position) FROM approvals r
                       WHERE r.request_id = a.request_id) AS names
               FROM approvals a WHERE a.approval_id = %s AND a.owner_id = %s""",
            (approval_id, owner_id),
        )
        row = await cur.fetchone()
    if row is None:
        raise NotFound("approval", approval_id)
    return ApprovalRef(
        approval_id=row["approval_id"], thread_id=row["thread_id"], tool=row["tool"], action=row["action"],
        request_id=row["request_id"], names=tuple(row["names"] or ()),
    )


def thread_status(*, pending: bool, latest: TurnEvent | None) -> ThreadStatus:
    """Where a thread stands, from its pending approval and its latest recorded event."""
    if latest is not None and not ends_run(latest):
        return "running"
    return "awaiting_approval" if pending else "idle"


async def list_threads(
    db: Database, owner_id: str, limit: int, kind: ThreadKind | None = "chat", search: str = "",
    *, only: str | None = None,
) -> list[ThreadSummary]:
    """The caller's threads of one kind (all kinds with ``None``), most recently active first.

    ``search`` keeps the threads whose title or messages contain it (case-insensitive); ``only``
    keeps the one thread of that id.
    """
    pattern = f"%{escape_like(search)}%" if search else None
    async with owner_scope.owner_reads(db.pool, owner_id) as conn:
        cur = await conn.execute(
            """SELECT t.thread_id, t.created_at, t.updated_at,
                      coalesce(t.title, (SELECT left(content, 80) FROM transcript
                                WHERE thread_id = t.thread_id AND role = 'user' ORDER BY id LIMIT 1), '') AS title,
                      EXISTS (SELECT 1 FROM approvals
                              WHERE thread_id = t.thread_id AND status = 'pending') AS pending,
                      (SELECT event FROM turn_events WHERE thread_id = t.thread_id ORDER BY id DESC LIMIT 1) AS latest
               FROM threads t WHERE t.owner_id = %(owner)s AND t.deleted_at IS NULL
                 AND (%(only)s::text IS NULL OR t.thread_id = %(only)s)
                 AND (%(pattern)s::text IS NULL OR t.title ILIKE %(pattern)s
                      OR EXISTS (SELECT 1 FROM transcript m WHERE m.thread_id = t.thread_id
                                 AND m.role IN ('user', 'assistant') AND m.content ILIKE %(pattern)s))
                 AND (%(kind)s::text IS NULL
                      OR (%(kind)s = 'run' AND t.thread_id LIKE 'bg:%%')
                      OR (%(kind)s = 'inbox' AND t.thread_id LIKE 'inbox:%%')
                      OR (%(kind)s = 'chat' AND t.thread_id NOT LIKE 'bg:%%' AND t.thread_id NOT LIKE 'inbox:%%'))
               ORDER BY t.updated_at DESC, t.thread_id LIMIT %(limit)s""",
            {"owner": owner_id, "kind": kind, "limit": limit, "pattern": pattern, "only": only},
        )
        rows = await cur.fetchall()
    return [
        ThreadSummary(
            thread_id=r["thread_id"], title=r["title"], created_at=r["created_at"], updated_at=r["updated_at"],
            status=thread_status(pending=bool(r["pending"]), latest=r["latest"]), kind=thread_kind(r["thread_id"]),
        )
        for r in rows
    ]


async def transcript(db: Database, thread_id: str, limit: int) -> list[MessageOut]:
    """The thread's last ``limit`` messages, oldest first (call after :func:`require_thread`)."""
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            """SELECT role, content, turn_id, created_at FROM (
                   SELECT id, role, content, turn_id, created_at FROM transcript
                   WHERE thread_id = %s AND role IN ('user', 'assistant') ORDER BY id DESC LIMIT %s) recent
               ORDER BY id""",
            (thread_id, limit),
        )
        rows = await cur.fetchall()
    return [
        MessageOut(role=r["role"], content=r["content"], turn_id=r["turn_id"], created_at=r["created_at"]) for r in rows
    ]


_RECORD_SQL: Final = """INSERT INTO turn_events (thread_id, turn_id, seq, owner_id, type, event)
    SELECT coalesce(e ->> 'thread_id', ''), e ->> 'turn_id', (e ->> 'seq')::integer, %s, e ->> 'type', e
    FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS batch (e, n)
    ORDER BY n
    ON CONFLICT (thread_id, turn_id, seq) DO UPDATE
    SET type = EXCLUDED.type, event = EXCLUDED.event, created_at = now(), id = nextval('turn_events_id_seq')
    RETURNING id"""


def event_json(event: TurnEvent) -> str:
    """``event`` as the log stores it and streams send it: compact JSON, anything else as its ``str``."""
    try:
        return orjson.dumps(event, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(event, default=str, separators=(",", ":"))


async def record_events(db: Database, owner_id: str, events: Sequence[TurnEvent]) -> list[TurnEvent]:
    """Append one run's ``events`` to the log, in order; return them as stored, each with its log ``id``.

    Ids are global and grow in the order events are appended. A re-run of a stored seq (a run
    retried after a crash) replaces the stale event and takes a new id.
    """
    payloads = [event_json(event) for event in events]
    async with db.pool.connection() as conn:
        cur = await conn.execute(_RECORD_SQL, (owner_id, "[" + ",".join(payloads) + "]"))
        ids = [int(row["id"]) for row in await cur.fetchall()]
    if len(ids) != len(payloads):
        raise RuntimeError(f"the event log stored {len(ids)} of {len(payloads)} events")
    return [orjson.loads(payload) | {"id": event_id} for payload, event_id in zip(payloads, sorted(ids), strict=True)]


async def events_after(db: Database, thread_id: str, after_id: int, turn_id: str | None = None) -> list[TurnEvent]:
    """The thread's recorded events with a log id above ``after_id`` (of one turn, with ``turn_id``), in order."""
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            """SELECT id, event FROM turn_events WHERE thread_id = %s AND id > %s
               AND (%s::text IS NULL OR turn_id = %s) ORDER BY id""",
            (thread_id, after_id, turn_id, turn_id),
        )
        rows = await cur.fetchall()
    return [row["event"] | {"id": int(row["id"])} for row in rows]


async def latest_event(db: Database, thread_id: str, turn_id: str | None = None) -> TurnEvent | None:
    """The last recorded event of the thread (of one turn, with ``turn_id``), with its log id."""
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            """SELECT id, event FROM turn_events WHERE thread_id = %s AND (%s::text IS NULL OR turn_id = %s)
               ORDER BY id DESC LIMIT 1""",
            (thread_id, turn_id, turn_id),
        )
        row = await cur.fetchone()
    return row["event"] | {"id": int(row["id"])} if row else None


async def first_event_id(db: Database, thread_id: str, turn_id: str) -> int:
    """The log id just before the first recorded event of a turn (0 if it has none)."""
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT coalesce(min(id), 1) - 1 AS before FROM turn_events WHERE thread_id = %s AND turn_id = %s",
            (thread_id, turn_id),
        )
        row = await cur.fetchone()
    return int(row["before"]) if row else 0
