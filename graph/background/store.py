"""The runs store: background run rows, their transitions and their event ledger.

Every transition is one guarded ``UPDATE ... WHERE status IN (...)``: two workers, a worker and
an API call, or a retry and a late original can never both move a run. Functions take a
connection so callers compose them into one transaction with a job deferral or a delivery.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from psycopg import AsyncConnection
from psycopg.rows import dict_row

__all__ = [
    "RUN_STATUSES",
    "BackgroundRun",
    "RunSource",
    "RunStatus",
    "add_event",
    "bg_thread",
    "ensure_inbox",
    "inbox_thread",
    "insert_run",
    "list_runs",
    "load_run",
    "new_run_id",
    "run_events",
    "transition",
]

RunStatus = Literal["queued", "running", "paused", "awaiting_approval", "succeeded", "failed", "cancelled"]
"""Where a run is in its life."""
RunSource = Literal["api", "offer", "trigger"]
"""What started a run."""
RUN_STATUSES: Final[tuple[RunStatus, ...]] = (
    "queued", "running", "paused", "awaiting_approval", "succeeded", "failed", "cancelled",
)
"""Every status, in life order."""

_COLUMNS: Final = (
    "run_id, owner_id, status, source, title, instruction, timezone, origin_thread_id, trigger_id,"
    " approval_id, cancel_requested, pause_requested, attempts, reply, outcome, error_code, error, created_at, started_at,"
    " finished_at, updated_at"
)


@dataclass(frozen=True, slots=True)
class BackgroundRun:
    """One background run as stored."""

    run_id: str
    """The run id; its turn runs on thread ``bg:<run_id>``."""
    owner_id: str
    """Whose run it is (every read is scoped to it)."""
    status: RunStatus
    """Where it is in its life."""
    source: RunSource
    """What started it."""
    title: str
    """A short label for lists and the delivered message."""
    instruction: str
    """The request its turn runs with (trigger data fenced inside as DATA)."""
    timezone: str
    """The owner's timezone for the turn."""
    origin_thread_id: str
    """The chat thread the result is delivered to."""
    trigger_id: str | None
    """The trigger rule that fired it, if any."""
    approval_id: str | None
    """The approval it waits on (``awaiting_approval``) or last waited on."""
    cancel_requested: bool
    """Whether the owner asked to cancel it while it ran."""
    pause_requested: bool
    """Whether the owner asked to pause it while it ran (cleared once paused)."""
    attempts: int
    """How many times a worker started it (crashes included)."""
    reply: str | None
    """The turn's final reply."""
    outcome: str | None
    """What really happened in the turn (``read``, ``executed``, ``rejected``...)."""
    error_code: str | None
    """Why it failed (an error code of the taxonomy)."""
    error: str | None
    """An honest, value-free description of the failure."""
    created_at: datetime
    """When it was created."""
    started_at: datetime | None
    """When a worker first started it."""
    finished_at: datetime | None
    """When it reached a final status."""
    updated_at: datetime
    """Last change."""

    @property
    def thread_id(self) -> str:
        """The run's own thread."""
        return bg_thread(self.run_id)

    def to_dict(self) -> dict[str, Any]:
        """The wire form (ISO 8601 times)."""
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            out[name] = value.isoformat() if isinstance(value, datetime) else value
        out["thread_id"] = self.thread_id
        return out


def bg_thread(run_id: str) -> str:
    """The thread a run's turn executes on."""
    return f"bg:{run_id}"


def new_run_id(*, derive_from: tuple[bytes, str] | None = None) -> str:
    """A fresh run id (128 random bits), or one derived by HMAC from (key, material) for idempotent creators."""
    if derive_from is None:
        return "run_" + secrets.token_hex(16)
    key, material = derive_from
    return "run_" + hmac.new(key, material.encode(), hashlib.sha256).hexdigest()[:32]


def inbox_thread(key: bytes, owner_id: str) -> str:
    """The owner's notice thread: unforgeable by other owners (an HMAC of the owner id)."""
    return "inbox:" + hmac.new(key, b"inbox:" + owner_id.encode(), hashlib.sha256).hexdigest()[:24]


async def ensure_inbox(conn: AsyncConnection[Any], key: bytes, owner_id: str) -> str:
    """Create the owner's notice thread if needed; return its id."""
    thread = inbox_thread(key, owner_id)
    await conn.execute(
        "INSERT INTO threads (thread_id, owner_id) VALUES (%s, %s) ON CONFLICT (thread_id) DO NOTHING",
        (thread, owner_id),
    )
    return thread


def _run(row: dict[str, Any]) -> BackgroundRun:
    return BackgroundRun(**{name: row[name] for name in BackgroundRun.__slots__})


async def insert_run(
    conn: AsyncConnection[Any],
    *,
    run_id: str,
    owner_id: str,
    source: RunSource,
    title: str,
    instruction: str,
    timezone: str,
    origin_thread_id: str,
    trigger_id: str | None = None,
) -> BackgroundRun | None:
    """Insert a queued run and its first ledger entry; ``None`` if ``run_id`` already exists."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"""INSERT INTO background_runs (run_id, owner_id, source, title, instruction, timezone,
                                             origin_thread_id, trigger_id)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
                ON CONFLICT (run_id) DO NOTHING RETURNING {_COLUMNS}""",
            (run_id, owner_id, source, title, instruction, timezone, origin_thread_id, trigger_id),
        )
        row = await cur.fetchone()
    if row is None:
        return None
    await add_event(conn, run_id, "queued", data={"source": source})
    return _run(row)


async def load_run(conn: AsyncConnection[Any], run_id: str, owner_id: str | None = None) -> BackgroundRun | None:
    """The run, scoped to ``owner_id`` when given (another owner's run is indistinguishable from none)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT {_COLUMNS} FROM background_runs WHERE run_id = %s AND (%s::text IS NULL OR owner_id = %s)",
            (run_id, owner_id, owner_id),
        )
        row = await cur.fetchone()
    return _run(row) if row else None


async def list_runs(
    conn: AsyncConnection[Any], owner_id: str, *, status: RunStatus | None = None, limit: int = 50
) -> list[BackgroundRun]:
    """The owner's runs, newest first."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"""SELECT {_COLUMNS} FROM background_runs
                WHERE owner_id = %s AND (%s::text IS NULL OR status = %s)
                ORDER BY created_at DESC, run_id LIMIT %s""",
            (owner_id, status, status, limit),
        )
        rows = await cur.fetchall()
    return [_run(r) for r in rows]


async def transition(
    conn: AsyncConnection[Any],
    run_id: str,
    *,
    from_: tuple[RunStatus, ...],
    to: RunStatus,
    attempt: int | None = None,
    **fields: Any,
) -> BackgroundRun | None:
    """Move the run from one of ``from_`` to ``to`` setting ``fields``; ``None`` if it was not in ``from_``.

    ``attempt``: only while that is still the run's current attempt (a worker that lost its run,
    stalled and then back, moves nothing).
    """
    allowed = {"approval_id", "cancel_requested", "pause_requested", "reply", "outcome", "error_code", "error"}
    unknown = set(fields) - allowed - {"attempts_plus"}
    if unknown:
        raise ValueError(f"transition cannot set {sorted(unknown)!r}")
    sets = ["status = %(to)s", "updated_at = now()"]
    if fields.pop("attempts_plus", False):
        sets.append("attempts = attempts + 1")
    if to == "running":
        sets.append("started_at = coalesce(started_at, clock_timestamp())")
    if to in ("succeeded", "failed", "cancelled"):
        sets.append("finished_at = clock_timestamp()")
    sets += [f"{name} = %({name})s" for name in fields]
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"UPDATE background_runs SET {', '.join(sets)} WHERE run_id = %(run)s AND status = ANY(%(from)s)"
            f" AND (%(attempt)s::integer IS NULL OR attempts = %(attempt)s) RETURNING {_COLUMNS}",
            {"to": to, "run": run_id, "from": list(from_), "attempt": attempt, **fields},
        )
        row = await cur.fetchone()
    return _run(row) if row else None


async def add_event(
    conn: AsyncConnection[Any],
    run_id: str,
    kind: str,
    *,
    attempt: int = 0,
    data: dict[str, Any] | None = None,
    turn_id: str | None = None,
    seq: int | None = None,
) -> bool:
    """Append to the run's ledger; a turn event already recorded (same turn and seq) is skipped.

    An entry of a worker's attempt (``attempt`` > 0) is written only while that is the run's
    current attempt; ``False`` says it was not (the worker lost its run) or was a duplicate.
    """
    cur = await conn.execute(
        """INSERT INTO background_run_events (run_id, kind, attempt, turn_id, seq, data)
           SELECT %(run)s, %(kind)s, %(attempt)s, %(turn)s, %(seq)s, %(data)s::jsonb
           WHERE %(attempt)s = 0
              OR EXISTS (SELECT 1 FROM background_runs WHERE run_id = %(run)s AND attempts = %(attempt)s)
           ON CONFLICT DO NOTHING""",
        {"run": run_id, "kind": kind, "attempt": attempt, "turn": turn_id, "seq": seq,
         "data": json.dumps(data or {}, default=str)},
    )
    return cur.rowcount == 1


async def run_events(conn: AsyncConnection[Any], run_id: str) -> list[dict[str, Any]]:
    """The run's ledger in order."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            "SELECT kind, attempt, turn_id, seq, data, at FROM background_run_events WHERE run_id = %s ORDER BY id",
            (run_id,),
        )
        rows = await cur.fetchall()
    return [r | {"at": r["at"].isoformat()} for r in rows]


async def ledger_summaries(conn: AsyncConnection[Any], run_ids: list[str]) -> list[dict[str, Any]]:
    """Per run of ``run_ids``: its status and attempts, and what its ledger counts.

    ``started``, ``retried``, ``tool_starts`` (turn events of type ``tool_start``), ``succeeded``
    and ``delivered`` count ledger entries; ``began`` and ``ended`` are the first start and the
    last success, ``pid`` the process of the first start. A run that ran exactly once reads
    ``succeeded``, 1 attempt, and 1, 0, 1, 1, 1.
    """
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            """SELECT r.run_id, r.owner_id, r.status, r.attempts,
                      count(*) FILTER (WHERE e.kind = 'started') AS started,
                      count(*) FILTER (WHERE e.kind = 'retried') AS retried,
                      count(*) FILTER (WHERE e.kind = 'turn' AND e.data->>'type' = 'tool_start') AS tool_starts,
                      count(*) FILTER (WHERE e.kind = 'succeeded') AS succeeded,
                      count(*) FILTER (WHERE e.kind = 'delivered') AS delivered,
                      min(e.at) FILTER (WHERE e.kind = 'started') AS began,
                      max(e.at) FILTER (WHERE e.kind = 'succeeded') AS ended,
                      min(e.data->>'pid') FILTER (WHERE e.kind = 'started') AS pid
               FROM background_runs r JOIN background_run_events e USING (run_id)
               WHERE r.run_id = ANY(%s) GROUP BY r.run_id""",
            (run_ids,),
        )
        return await cur.fetchall()
