"""The LangGraph Postgres checkpointer, with deserialization restricted to safe types."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from psycopg import AsyncConnection, AsyncCursor
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from graph import turn_db
from graph.checkpoint_guard import AuditedPostgresSaver, CheckpointRefused, StrictSerializer, assert_strict
from graph.db import Database

__all__ = ["INTERRUPT_CHANNEL", "TurnSaver", "open_checkpointer", "strict_serializer"]

INTERRUPT_CHANNEL = "__interrupt__"
"""LangGraph's channel for interrupt writes (private to LangGraph 1.x, which is pinned)."""

_interrupt_writes: ContextVar[str] = ContextVar("tollgate_interrupt_writes", default="")
"""The checkpoint id of the interrupt :meth:`TurnSaver.aput_writes` is storing, if it may end a turn's run."""


def _ends_run(turn: turn_db.TurnDb, checkpoint_id: str) -> bool:
    """Whether interrupt writes on ``checkpoint_id`` are the last statements of ``turn``'s run."""
    return bool(checkpoint_id) and turn.release_with_interrupt and checkpoint_id == turn.written_checkpoint


def strict_serializer() -> JsonPlusSerializer:
    """Msgpack restricted to LangGraph's safe types; no pickle fallback, ever.

    Tollgate state holds only JSON values and LangChain messages, all in the safe list.
    """
    serde = StrictSerializer()
    assert_strict(serde)
    return serde


class TurnSaver(AuditedPostgresSaver):
    """The audited saver, sharing a turn's connection and reading its checkpoint ahead.

    Inside a turn (:mod:`graph.turn_db`) every operation runs on the turn's connection;
    elsewhere each takes a connection from the pool. Either way there is no saver-wide lock:
    LangGraph's guards a single shared connection, which a pool does not need, and under load
    it made every turn of the process wait for every other turn's checkpoint reads and writes.
    """

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        if self.pipe is not None or not isinstance(self.conn, AsyncConnectionPool):
            async with super()._cursor(pipeline=pipeline) as cur:
                yield cur
            return
        turn = turn_db.current(self.conn)
        if turn is not None:
            async with turn.lock:
                async with self._cursor_on(turn.conn, pipeline, turn) as cur:
                    yield cur
            return
        async with self.conn.connection() as conn, self._cursor_on(conn, pipeline) as cur:
            yield cur

    @asynccontextmanager
    async def _cursor_on(
        self, conn: AsyncConnection[Any], pipeline: bool, turn: turn_db.TurnDb | None = None
    ) -> AsyncIterator[AsyncCursor[DictRow]]:
        if pipeline:
            release = turn is not None and not turn.released and (
                turn.release_early or _ends_run(turn, _interrupt_writes.get())
            )
            try:
                async with conn.pipeline() as pipe, conn.cursor(binary=True, row_factory=dict_row) as cur:
                    if turn is not None:  # audit records first, each committed on its own
                        await turn_db.queue_ahead(turn, pipe)
                    # The turn's deferred bookkeeping goes next, in the same transaction (the
                    # pipeline's one Sync ends it): it commits with this write or not at all.
                    if release:
                        await cur.execute("BEGIN")
                    for sql, params in turn.take_deferred() if turn is not None else []:
                        await cur.execute(sql, params)
                    yield cur
                    if release and turn is not None:
                        # The lock goes only after the commit: the next turn must read this checkpoint.
                        await cur.execute("COMMIT")
                        await cur.execute("SELECT pg_advisory_unlock(%s)", (turn.lock_key,))
            except BaseException:
                if release and not conn.broken and conn.info.transaction_status != TransactionStatus.IDLE:
                    await conn.rollback()
                raise
            if release and turn is not None:
                turn.released = True  # only once the pipeline synced without an error
        else:
            if turn is not None:
                await turn_db.flush_ahead(turn)
            async with conn.cursor(binary=True, row_factory=dict_row) as cur:
                yield cur

    def latest_query(self, thread_id: str) -> tuple[str, tuple[Any, ...]]:
        """The statement :meth:`aget_tuple` runs for the latest checkpoint of ``thread_id`` (for priming)."""
        return self.latest_query_for("%s", (thread_id,))

    def latest_query_for(self, thread_sql: str, params: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
        """:meth:`latest_query` for the thread an SQL expression (``thread_sql`` with ``params``) selects."""
        where = f"WHERE thread_id = {thread_sql} AND checkpoint_ns = %s ORDER BY checkpoint_id DESC LIMIT 1"
        return self.SELECT_SQL + where, (*params, "")

    async def load_latest(self, row: dict[str, Any] | None) -> tuple[bool, CheckpointTuple | None]:
        """Load a row of :meth:`latest_query`: (whether it could be loaded here, the tuple).

        A checkpoint in a pre-v4 format needs another query to migrate; it is left to :meth:`aget_tuple`.
        """
        if row is None:
            return True, None
        if row["checkpoint"]["v"] < 4 and row["parent_checkpoint_id"]:
            return False, None
        try:
            return True, await self._load_checkpoint_tuple(row)
        except CheckpointRefused as exc:
            await self._audit({"configurable": {"thread_id": row["thread_id"]}}, exc)  # as aget_tuple would
            raise

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config.get("configurable") or {}
        turn = turn_db.current(self.conn)
        if turn is not None and not get_checkpoint_id(config) and not configurable.get("checkpoint_ns"):
            primed, saved = turn.take(str(configurable.get("thread_id", "")))
            if primed:
                return saved
        return await super().aget_tuple(config)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        turn = turn_db.current(self.conn)
        if turn is None or all(channel != INTERRUPT_CHANNEL for channel, _ in writes):
            await super().aput_writes(config, writes, task_id, task_path)
            return
        # An interrupt's writes end a run whose checkpoint is written at its exit, just before
        # them: once that checkpoint is in (checked under the turn's lock, by its id), the lock
        # goes in their round trip, after they commit.
        marked = _interrupt_writes.set(str(config["configurable"].get("checkpoint_id") or ""))  # this task only
        try:
            await super().aput_writes(config, writes, task_id, task_path)
        finally:
            _interrupt_writes.reset(marked)

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        # A later read of this thread in the same turn must see this checkpoint, not the primed one.
        turn = turn_db.current(self.conn)
        if turn is not None:
            turn.take(str(config["configurable"]["thread_id"]))
        saved = await super().aput(config, checkpoint, metadata, new_versions)
        if turn is not None:
            turn.written_checkpoint = checkpoint["id"]
        return saved


async def open_checkpointer(
    db: Database, *, setup: bool = True, serde: JsonPlusSerializer | None = None
) -> AsyncPostgresSaver:
    """A checkpointer over the database's pool; ``setup`` applies its own migrations.

    Start-up refuses a permissive ``serde`` (pickle, extra modules, JSON constructors); a blob
    that asks for anything outside the safe types is refused on load and audited.
    """
    serde = serde if serde is not None else strict_serializer()
    assert_strict(serde)
    saver = TurnSaver(conn=db.pool, serde=serde)
    if setup:
        await saver.setup()
    return saver
