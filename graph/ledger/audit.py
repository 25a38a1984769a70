"""The audit log writer: one append-only, hash-chained row per governance decision.

A record holds codes, never values: owner, thread, turn, stage, decision, reason code, error
code, tool, action, the args hash and a small ``detail`` of kinds and counts. Its body is the
RFC 8785 canonical JSON of those fields; the database trigger (migration 0003) numbers the row
and chains it (``row_hash = sha256(prev_hash || body)``). :func:`verify_chain` recomputes the
chain from the rows alone, so an edited, removed or reordered row is found. As a last guard,
a body in which DLP finds anything is refused (a programming error: no secret is persisted).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

import rfc8785
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tollgate.policies.dlp import scan_text

__all__ = [
    "AUDIT_VERSION",
    "AuditLeak",
    "AuditRecord",
    "ChainVerdict",
    "DetailValue",
    "Stage",
    "append_audit",
    "verify_chain",
]

AUDIT_VERSION: Final = 1
"""Schema version of an audit body (``v``)."""

_GENESIS: Final = "0" * 64

Stage = Literal["picker", "gate", "ids", "propose", "approval", "execute", "offer", "serde", "runner", "graph", "http"]
"""Where in the turn the decision was taken."""

DetailValue = str | int | bool | list[str]
"""Detail values are kinds, counts and flags: nothing a caller typed."""

_COLUMNS: Final = (
    "owner_id", "thread_id", "turn_id", "stage", "decision", "reason", "code", "tool", "action", "args_hash", "mode",
)
_MAX_TEXT: Final = 200
_SHA256_HEX: Final = re.compile(r"[0-9a-f]{64}")


class AuditLeak(ValueError):
    """An audit body would have carried something DLP flags; nothing was written."""

    def __init__(self, kinds: tuple[str, ...]) -> None:
        self.kinds = kinds
        super().__init__(f"refusing to write an audit record containing {len(kinds)} flagged kind(s): {kinds!r}")


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One decision, as codes."""

    owner_id: str
    """The owner the call acted for (from the run context)."""
    stage: Stage
    """Which part of the turn decided."""
    decision: str
    """``execute``, ``propose``, ``refuse``, ``clarify``, ``approve``, ``reject``, ``failed``, ``blocked``..."""
    reason: str
    """A reason code (``operator_only``, ``dlp_finding``, ``not_returned``...)."""
    code: str = ""
    """The error code for refusals (``permission_denied``...)."""
    tool: str = ""
    """The tool, when the call decoded."""
    action: str = ""
    """The action, when the call decoded."""
    args_hash: str = ""
    """SHA-256 of the canonical arguments: proves which call it was without storing values."""
    thread_id: str = ""
    """The thread."""
    turn_id: str = ""
    """The turn."""
    mode: str = "enforce"
    """The governance mode in force (``shadow`` records what enforce would have done)."""
    detail: Mapping[str, DetailValue] = field(default_factory=dict)
    """Kinds, counts and flags (for example ``{"dlp": ["aws_access_key_id"], "shadow": true}``)."""

    def body(self, ts: datetime) -> str:
        """The canonical JSON that is stored and chained."""
        for name in _COLUMNS:
            value = getattr(self, name)
            if not isinstance(value, str) or len(value) > _MAX_TEXT:
                raise ValueError(f"audit field {name!r} must be a string of at most {_MAX_TEXT} characters")
        if self.args_hash and not _SHA256_HEX.fullmatch(self.args_hash):
            raise ValueError("audit field 'args_hash' must be a SHA-256 hex digest")
        detail: dict[str, Any] = {}
        for key, value in self.detail.items():
            if isinstance(value, list):
                if not all(isinstance(v, str) and len(v) <= _MAX_TEXT for v in value) or len(value) > 50:
                    raise ValueError(f"audit detail {key!r} must be a short list of short strings")
            elif not isinstance(value, (str, int, bool)) or (isinstance(value, str) and len(value) > _MAX_TEXT):
                raise ValueError(f"audit detail {key!r} must be a kind, a count or a flag")
            detail[key] = value
        doc = {name: getattr(self, name) for name in _COLUMNS} | {
            "v": AUDIT_VERSION,
            "ts": ts.isoformat(),
            "detail": detail,
        }
        # One scan of the values joined by newlines finds what a scan of each value finds (every
        # detector's boundaries hold at a newline) at a quarter of the cost: it runs on every decision.
        # The args hash and the timestamp are made here (checked above and by ``isoformat``), and
        # the hash's 64 hex digits would only send the scanner decoding them as hex and base64.
        report = scan_text("\n".join(_texts({k: v for k, v in doc.items() if k not in ("args_hash", "ts")})))
        if not report.clean:
            raise AuditLeak(report.kinds)
        return rfc8785.dumps(doc).decode("utf-8")


def _texts(value: object) -> list[str]:
    """Every string value of ``value`` (what a per-value scan would read), keys excluded."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [text for item in value.values() for text in _texts(item)]
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in _texts(item)]
    return []


async def append_audit(
    db: AsyncConnectionPool[Any] | AsyncConnection[Any], record: AuditRecord, *, now: datetime
) -> int:
    """Append ``record``; return its sequence number. Works on a pool or inside a caller's transaction.

    A record is a fact about what was decided, committed before the turn goes on to what it
    allows, and written whoever holds the thread: a turn that lost its lease still says what it tried.
    """
    body = record.body(now)
    if isinstance(db, AsyncConnectionPool):
        async with db.connection() as conn:
            cur = await conn.execute("INSERT INTO audit_log (body) VALUES (%s) RETURNING seq", (body,))
            row = await cur.fetchone()
    else:
        cur = await db.execute("INSERT INTO audit_log (body) VALUES (%s) RETURNING seq", (body,))
        row = await cur.fetchone()
    if row is None:  # pragma: no cover - INSERT ... RETURNING always returns the row
        raise RuntimeError("audit insert returned nothing")
    return int(row["seq"] if isinstance(row, Mapping) else row[0])


@dataclass(frozen=True, slots=True)
class ChainVerdict:
    """The outcome of :func:`verify_chain`."""

    ok: bool
    """Whether every row checked out."""
    rows: int
    """Rows checked."""
    first_bad_seq: int | None = None
    """The first row that failed, if any."""
    problem: str = ""
    """What failed: ``gap``, ``prev_hash``, ``row_hash``, ``column:<name>`` or ``body``."""


async def verify_chain(conn: AsyncConnection[Any]) -> ChainVerdict:
    """Recompute the whole chain from the stored rows (``O(rows)``, streamed).

    Detects an edited body or column, a removed or reordered row, and a forged hash. It cannot
    see rows removed from the end; anchor ``(seq, row_hash)`` of the newest row elsewhere for that.
    """
    async with conn.transaction():
        return await _verify_rows(conn)


async def _verify_rows(conn: AsyncConnection[Any]) -> ChainVerdict:
    expected_prev = _GENESIS
    expected_seq = 1
    count = 0
    cur = conn.cursor(name="tollgate_audit_verify")
    try:
        await cur.execute(
            "SELECT seq, body, prev_hash, row_hash, detail, created_at, "
            + ", ".join(_COLUMNS)
            + " FROM audit_log ORDER BY seq"
        )
        async for raw in cur:
            row = dict(raw) if isinstance(raw, Mapping) else dict(zip([d.name for d in cur.description or []], raw))
            count += 1
            seq = int(row["seq"])
            if seq != expected_seq:
                return ChainVerdict(False, count, seq, "gap")
            if row["prev_hash"] != expected_prev:
                return ChainVerdict(False, count, seq, "prev_hash")
            digest = hashlib.sha256((row["prev_hash"] + row["body"]).encode("utf-8")).hexdigest()
            if digest != row["row_hash"]:
                return ChainVerdict(False, count, seq, "row_hash")
            try:
                doc = json.loads(row["body"])
            except ValueError:
                return ChainVerdict(False, count, seq, "body")
            for name in _COLUMNS:
                if doc.get(name) != row[name]:
                    return ChainVerdict(False, count, seq, f"column:{name}")
            if doc.get("detail") != row["detail"]:
                return ChainVerdict(False, count, seq, "column:detail")
            if datetime.fromisoformat(doc.get("ts", "")) != row["created_at"]:
                return ChainVerdict(False, count, seq, "column:created_at")
            expected_prev = row["row_hash"]
            expected_seq += 1
    finally:
        await cur.close()
    return ChainVerdict(True, count)
