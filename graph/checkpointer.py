"""The LangGraph Postgres checkpointer, with deserialization restricted to safe types."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from psycopg import AsyncConnection, AsyncCursor
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import Jsonb
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

    LangGraph (de)serializes blobs and writes in a worker thread (``asyncio.to_thread``), so a
    large state cannot stall the event loop. A turn's state is small (the conversation lives in
    the transcript table), and there the hop costs more than the work: four hops were about
    0.5 ms of CPU per write and approval (``python -m bench --only P2``). In a turn, ``aput``,
    ``aput_writes`` and ``_load_checkpoint_tuple`` therefore run LangGraph's own code (pinned)
    with the serialization inline; ``tests/test_checkpointer.py`` fails if that code changes.
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
            if turn is not None:
                await turn_db.settle(turn)
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
                    if turn is not None:  # a checkpoint held for this write goes with it
                        await turn_db.run_statements(cur, turn.take_held())
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
            if turn is not None:  # audit records first; a read must see a checkpoint held back
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
            return True, self._tuple_of(row)
        except CheckpointRefused as exc:
            await self._audit({"configurable": {"thread_id": row["thread_id"]}}, exc)  # as aget_tuple would
            raise

    async def _load_checkpoint_tuple(self, value: DictRow) -> CheckpointTuple:
        if turn_db.current(self.conn) is None:
            return await super()._load_checkpoint_tuple(value)
        return self._tuple_of(value)

    def _tuple_of(self, value: DictRow | dict[str, Any]) -> CheckpointTuple:
        """LangGraph's ``_load_checkpoint_tuple``, with the pending writes deserialized inline (see the class docstring)."""

        def config_of(checkpoint_id: str) -> RunnableConfig:
            return {"configurable": {"thread_id": value["thread_id"], "checkpoint_ns": value["checkpoint_ns"],
                                     "checkpoint_id": checkpoint_id}}

        checkpoint = value["checkpoint"]
        return CheckpointTuple(
            config_of(value["checkpoint_id"]),
            {
                **checkpoint,
                "channel_values": {
                    **(checkpoint.get("channel_values") or {}),
                    **self._load_blobs(value["channel_values"]),
                },
            },
            value["metadata"],
            config_of(value["parent_checkpoint_id"]) if value["parent_checkpoint_id"] else None,
            self._load_writes(value["pending_writes"]),
        )

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
        if turn is None:
            await super().aput_writes(config, writes, task_id, task_path)
            return
        # As LangGraph's, with the writes serialized inline (see the class docstring).
        configurable = config["configurable"]
        query = (
            self.UPSERT_CHECKPOINT_WRITES_SQL
            if all(w[0] in WRITES_IDX_MAP for w in writes)
            else self.INSERT_CHECKPOINT_WRITES_SQL
        )
        params = self._dump_writes(
            configurable["thread_id"], configurable["checkpoint_ns"], configurable["checkpoint_id"], task_id, task_path,
            writes,
        )
        # An interrupt's writes end a run whose checkpoint is written at its exit, just before
        # them (held, it goes in their transaction): once that checkpoint is in or held (checked
        # under the turn's lock, by its id), the lock goes in their round trip, after they commit.
        interrupt = any(channel == INTERRUPT_CHANNEL for channel, _ in writes)
        marked = _interrupt_writes.set(str(configurable.get("checkpoint_id") or "") if interrupt else "")  # this task only
        try:
            async with self._cursor(pipeline=True) as cur:
                await cur.executemany(query, params)
        finally:
            _interrupt_writes.reset(marked)

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        # A later read of this thread in the same turn must see this checkpoint, not the primed one.
        turn = turn_db.current(self.conn)
        if turn is None:
            return await super().aput(config, checkpoint, metadata, new_versions)
        turn.take(str(config["configurable"]["thread_id"]))
        saved, statements = self._aput_statements(config, checkpoint, metadata, new_versions)
        if turn.interrupted and turn.release_with_interrupt and not turn.held:
            # The exit checkpoint of a run that stopped at an interrupt: the interrupt's writes come
            # next and end the run. Held, it goes in their round trip and their transaction.
            turn.held = statements
        else:
            async with self._cursor(pipeline=True) as cur:
                await turn_db.run_statements(cur, statements)
        turn.written_checkpoint = checkpoint["id"]
        return saved

    def _aput_statements(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> tuple[RunnableConfig, list[tuple[str, Any, bool]]]:
        """LangGraph's :meth:`aput` as statements, with the blobs serialized inline (see the class docstring)."""
        configurable = config["configurable"].copy()
        thread_id = configurable.pop("thread_id")
        checkpoint_ns = configurable.pop("checkpoint_ns")
        checkpoint_id = configurable.pop("checkpoint_id", None)
        copy = checkpoint.copy()
        copy["channel_values"] = copy["channel_values"].copy()
        next_config: RunnableConfig = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint["id"]}
        }
        # Primitive values stay inline in the checkpoint row; the others go to the blobs table.
        blob_values = {}
        for k, v in checkpoint["channel_values"].items():
            if isinstance(v, _DeltaSnapshot):
                blob_values[k] = copy["channel_values"].pop(k)
                copy["channel_values"][k] = True
            elif v is None or isinstance(v, (str, int, float, bool)):
                pass
            else:
                blob_values[k] = copy["channel_values"].pop(k)
        statements: list[tuple[str, Any, bool]] = []
        if blob_versions := {k: v for k, v in new_versions.items() if k in blob_values}:
            statements.append((
                self.UPSERT_CHECKPOINT_BLOBS_SQL, self._dump_blobs(thread_id, checkpoint_ns, blob_values, blob_versions),
                True,
            ))
        statements.append((
            self.UPSERT_CHECKPOINTS_SQL,
            (
                thread_id, checkpoint_ns, checkpoint["id"], checkpoint_id, Jsonb(copy),
                Jsonb(get_serializable_checkpoint_metadata(config, metadata)),
            ),
            False,
        ))
        return next_config, statements


async def open_checkpointer(
    db: Database, *, setup: bool = True, serde: JsonPlusSerializer | None = None
) -> AsyncPostgresSaver:
    """A checkpointer over the database's pool; ``setup`` applies its own migrations.

    Start-up refuses a permissive ``serde`` (pickle, extra modules, JSON constructors); a blob
    that asks for anything outside the safe types is refused on load and audited.
    """
    serde = serde if serde is not None else strict_serializer()
    assert_strict(serde)
    if setup:
        await _set_up_one_at_a_time(db, serde)
    return TurnSaver(conn=db.pool, serde=serde)


_SETUP_LOCK_KEY: Final = 0x746F6C63  # "tolc"


async def _try_lock(conn: AsyncConnection[DictRow], key: int) -> bool:
    cur = await conn.execute("SELECT pg_try_advisory_lock(%s) AS locked", (key,))
    row = await cur.fetchone()
    return bool(row and row["locked"])


async def _set_up_one_at_a_time(db: Database, serde: JsonPlusSerializer) -> None:
    """LangGraph's checkpoint migrations, one process at a time.

    ``AsyncPostgresSaver.setup`` reads the applied version, then inserts each next one: a server
    and a worker starting at once on a fresh database both apply version 0, and one fails with a
    unique violation. Its ``CREATE INDEX CONCURRENTLY`` cannot run in a transaction, so this takes
    a session lock on the one connection setup runs on and releases it before the connection
    goes back to the pool (a broken connection releases it with its session).

    The lock is tried, not waited for: ``CREATE INDEX CONCURRENTLY`` waits for every transaction
    with an older snapshot, and a statement waiting in ``pg_advisory_lock`` is one, so the holder
    would wait for the waiter (a deadlock PostgreSQL detects and breaks by failing a start).
    """
    async with db.pool.connection() as conn:
        while not await _try_lock(conn, _SETUP_LOCK_KEY):
            await asyncio.sleep(0.05)
        try:
            await AsyncPostgresSaver(conn=conn, serde=serde).setup()
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK_KEY,))
