"""Checkpoint hardening: a strict serializer that refuses (not just skips) unsafe blobs, audited.

LangGraph's strict msgpack mode already declines to import types outside its safe list, but
it then returns the raw payload and logs a warning. :class:`StrictSerializer` turns any such
serde event (a blocked msgpack type or method) into :class:`CheckpointRefused`, and refuses
every blob type LangGraph does not write today (``json``, a legacy format, and ``pickle``), so
a tampered checkpoint never loads at all. :func:`audit_refusal` writes one audit record per
refusal. :func:`assert_strict` is the start-up check that refuses a permissive serializer: it
probes the serializer's behaviour (a blocked type, a pickle blob) rather than its attributes.
"""

from __future__ import annotations

import logging
import os
import pickle
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from psycopg_pool import AsyncConnectionPool

from tollgate.graph.ledger.audit import AuditLeak, AuditRecord, append_audit
from tollgate.policies.errors import ErrorCode, TollgateError

__all__ = ["CheckpointRefused", "PermissiveSerializer", "StrictSerializer", "assert_strict", "audit_refusal"]

_events: ContextVar[list[SerdeEvent] | None] = ContextVar("tollgate_serde_events", default=None)
_MAX_NAME: Final = 100
_LOADABLE: Final = frozenset({"null", "bytes", "bytearray", "msgpack"})
"""The blob types LangGraph writes (``dumps_typed``); anything else is refused on load."""


def _collect(event: SerdeEvent) -> None:
    sink = _events.get()
    if sink is not None:
        sink.append(event)


# One process-wide listener; it only collects inside StrictSerializer.loads_typed (a context var).
register_serde_event_listener(_collect)


class CheckpointRefused(TollgateError):
    """A checkpoint blob asked for a type or call outside the safe list; nothing was loaded."""

    code: ErrorCode = "permission_denied"

    def __init__(self, blocked: tuple[str, ...]) -> None:
        self.blocked = blocked
        super().__init__(f"checkpoint refused: {len(blocked)} blocked type(s) or call(s)")


class PermissiveSerializer(ValueError):
    """Start-up refused a checkpoint serializer that could import or unpickle arbitrary code."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(f"refusing a permissive checkpoint serializer: {problem}")


def _name(event: SerdeEvent) -> str:
    parts = [event.get("module", ""), event.get("name", "")]
    if event.get("method"):
        parts.append(str(event.get("method")))
    return ".".join(str(p)[:_MAX_NAME] for p in parts)


class StrictSerializer(JsonPlusSerializer):
    """LangGraph's safe types only, and any attempt at more refuses the whole blob."""

    def __init__(self) -> None:
        # LangGraph's defaults already leave pickle and JSON constructors off; ``None`` pins msgpack
        # to its safe list whatever the environment says.
        super().__init__(allowed_msgpack_modules=None)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_, _ = data
        if type_ not in _LOADABLE:
            raise CheckpointRefused((f"serialization:{str(type_)[:_MAX_NAME]}",))
        events: list[SerdeEvent] = []
        token = _events.set(events)
        try:
            value = super().loads_typed(data)
        finally:
            _events.reset(token)
        if events:
            raise CheckpointRefused(tuple(dict.fromkeys(_name(e) for e in events)))
        return value


@dataclass(frozen=True)
class _Probe:
    """A type outside LangGraph's safe list: a strict serializer must refuse to load it."""

    marker: int = 1


def assert_strict(serde: object) -> None:
    """Refuse a serializer that could run code on load (start-up check), by trying it."""
    if os.environ.get("LANGGRAPH_STRICT_MSGPACK", "").lower() not in ("1", "true", "yes"):
        raise PermissiveSerializer("LANGGRAPH_STRICT_MSGPACK is not set (import graph._env first)")
    if not isinstance(serde, StrictSerializer):
        raise PermissiveSerializer(f"{type(serde).__name__} is not Tollgate's StrictSerializer")
    # LangGraph logs each blocked type it meets; the probe's own is expected, so not logged.
    langgraph_log = logging.getLogger(JsonPlusSerializer.__module__)
    quiet, langgraph_log.disabled = langgraph_log.disabled, True
    try:
        for probe, problem in (
            (serde.dumps_typed(_Probe()), "a type outside the safe list loads"),
            (("pickle", pickle.dumps(1)), "a pickle blob loads"),
        ):
            try:
                serde.loads_typed(probe)
            except CheckpointRefused:
                continue
            raise PermissiveSerializer(problem)
    finally:
        langgraph_log.disabled = quiet


async def audit_refusal(pool: AsyncConnectionPool[Any], config: RunnableConfig | None, exc: CheckpointRefused) -> None:
    """Record one refused checkpoint (its thread, its owner and what was blocked)."""
    configurable = (config or {}).get("configurable") or {}
    thread_id = str(configurable.get("thread_id", ""))[:200]
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT owner_id FROM threads WHERE thread_id = %s", (thread_id,))
        row = await cur.fetchone()
    owner = str(row["owner_id"]) if row is not None else ""
    record = AuditRecord(
        owner_id=owner, stage="serde", decision="refuse", reason="blocked_type", code=exc.code,
        thread_id=thread_id, detail={"blocked": list(exc.blocked[:20])},
    )
    try:
        await append_audit(pool, record, now=datetime.now(UTC))
    except AuditLeak:
        # The blocked names themselves looked like secrets: record the refusal without them.
        record = AuditRecord(owner_id=owner, stage="serde", decision="refuse", reason="blocked_type",
                             code=exc.code, thread_id=thread_id, detail={"blocked": len(exc.blocked)})
        await append_audit(pool, record, now=datetime.now(UTC))
