"""The LangGraph Postgres checkpointer, with deserialization restricted to safe types."""

from __future__ import annotations

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from graph.db import Database

__all__ = ["open_checkpointer", "strict_serializer"]


def strict_serializer() -> JsonPlusSerializer:
    """Msgpack restricted to LangGraph's safe types; no pickle fallback, ever.

    Tollgate state holds only JSON values and LangChain messages, all in the safe list.
    """
    serde = JsonPlusSerializer(pickle_fallback=False, allowed_msgpack_modules=None)
    if serde.pickle_fallback:  # pragma: no cover - a guard against a library default change
        raise RuntimeError("refusing a checkpoint serializer with pickle fallback")
    return serde


async def open_checkpointer(db: Database, *, setup: bool = True) -> AsyncPostgresSaver:
    """A checkpointer over the database's pool; ``setup`` applies its own migrations."""
    saver = AsyncPostgresSaver(conn=db.pool, serde=strict_serializer())
    if setup:
        await saver.setup()
    return saver
