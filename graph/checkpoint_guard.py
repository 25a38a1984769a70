"""Checkpoint hardening: a strict serializer that refuses (not just skips) unsafe blobs, audited.

LangGraph's strict msgpack mode already declines to import types outside its safe list, but
it then returns the raw payload and logs a warning. :class:`StrictSerializer` turns any such
serde event — a blocked msgpack type or method, a JSON constructor outside the safe list, a
pickle blob — into :class:`CheckpointRefused`, so a tampered checkpoint never loads at all.
:class:`AuditedPostgresSaver` writes one audit record per refusal before re-raising.
:func:`assert_strict` is the start-up check that refuses a permissive serializer.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde import _msgpack as lg_msgpack
from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from graph.audit import AuditLeak, AuditRecord, append_audit
from policies.errors import ErrorCode, TollgateError

__all__ = ["AuditedPostgresSaver", "CheckpointRefused", "PermissiveSerializer", "StrictSerializer", "assert_strict"]

_events: ContextVar[list[SerdeEvent] | None] = ContextVar("tollgate_serde_events", default=None)
_MAX_NAME: Final = 100


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

    def _reviver(self, value: dict[str, Any]) -> Any:
        if value.get("lc") == 2 and value.get("type") == "constructor" and isinstance(value.get("id"), list):
            ids = [str(i) for i in value["id"]]
            if len(ids) < 2 or (".".join(ids[:-1]), ids[-1]) not in lg_msgpack.SAFE_MSGPACK_TYPES:
                _collect({"kind": "json_blocked", "module": ".".join(ids[:-1]), "name": ids[-1] if ids else ""})
                return None
        return super()._reviver(value)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_, _ = data
        if type_ not in ("null", "bytes", "bytearray", "json", "msgpack"):
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


def assert_strict(serde: object) -> None:
    """Refuse a serializer that could run code on load (start-up check)."""
    if os.environ.get("LANGGRAPH_STRICT_MSGPACK", "").lower() not in ("1", "true", "yes"):
        raise PermissiveSerializer("LANGGRAPH_STRICT_MSGPACK is not set (import graph._env first)")
    if not isinstance(serde, StrictSerializer):
        raise PermissiveSerializer(f"{type(serde).__name__} is not Tollgate's StrictSerializer")
    if serde.pickle_fallback:
        raise PermissiveSerializer("pickle fallback is on")
    if getattr(serde, "_allowed_msgpack_modules", None) is not None:
        raise PermissiveSerializer("extra msgpack modules are allowed")
    if getattr(serde, "_allowed_json_modules", None):
        raise PermissiveSerializer("JSON constructors are allowed")


class AuditedPostgresSaver(AsyncPostgresSaver):
    """The Postgres checkpointer; a refused checkpoint is audited once, then raised."""

    async def _audit(self, config: RunnableConfig | None, exc: CheckpointRefused) -> None:
        configurable = (config or {}).get("configurable") or {}
        thread_id = str(configurable.get("thread_id", ""))[:200]
        owner = ""
        async with self.conn.connection() as conn:  # type: ignore[union-attr]
            cur = await conn.execute("SELECT owner_id FROM threads WHERE thread_id = %s", (thread_id,))
            row = await cur.fetchone()
            if row is not None:
                owner = str(row["owner_id"] if isinstance(row, dict) else row[0])
        record = AuditRecord(
            owner_id=owner, stage="serde", decision="refuse", reason="blocked_type", code=exc.code,
            thread_id=thread_id, detail={"blocked": list(exc.blocked[:20])},
        )
        try:
            await append_audit(self.conn, record, now=datetime.now(UTC))  # type: ignore[arg-type]
        except AuditLeak:
            # The blocked names themselves looked like secrets: record the refusal without them.
            record = AuditRecord(owner_id=owner, stage="serde", decision="refuse", reason="blocked_type",
                                 code=exc.code, thread_id=thread_id, detail={"blocked": len(exc.blocked)})
            await append_audit(self.conn, record, now=datetime.now(UTC))  # type: ignore[arg-type]

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        try:
            return await super().aget_tuple(config)
        except CheckpointRefused as exc:
            await self._audit(config, exc)
            raise

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002 - the base class's parameter name
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        try:
            async for item in super().alist(config, filter=filter, before=before, limit=limit):
                yield item
        except CheckpointRefused as exc:
            await self._audit(config, exc)
            raise
