"""The LangGraph Postgres checkpointer, with deserialization restricted to safe types."""

from __future__ import annotations

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from graph.checkpoint_guard import AuditedPostgresSaver, StrictSerializer, assert_strict
from graph.db import Database

__all__ = ["open_checkpointer", "strict_serializer"]


def strict_serializer() -> JsonPlusSerializer:
    """Msgpack restricted to LangGraph's safe types; no pickle fallback, ever.

    Tollgate state holds only JSON values and LangChain messages, all in the safe list.
    """
    serde = StrictSerializer()
    assert_strict(serde)
    return serde


async def open_checkpointer(
    db: Database, *, setup: bool = True, serde: JsonPlusSerializer | None = None
) -> AsyncPostgresSaver:
    """A checkpointer over the database's pool; ``setup`` applies its own migrations.

    Start-up refuses a permissive ``serde`` (pickle, extra modules, JSON constructors); a blob
    that asks for anything outside the safe types is refused on load and audited.
    """
    serde = serde if serde is not None else strict_serializer()
    assert_strict(serde)
    saver = AuditedPostgresSaver(conn=db.pool, serde=serde)
    if setup:
        await saver.setup()
    return saver
