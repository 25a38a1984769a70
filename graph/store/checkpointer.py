"""The LangGraph Postgres checkpointer: one pooled connection per operation, writes fenced by the turn's lease.

:class:`TollgateSaver` is LangGraph's own :class:`AsyncPostgresSaver` with two changes, both
through its public methods:

* **A connection per operation.** Over a pool, LangGraph's saver runs every operation of the
  process under one lock of its own (it guards a single shared connection). Here each operation
  takes a pooled connection and runs LangGraph's own code on it, through a saver bound to that
  connection alone, so concurrent turns never wait on one another's checkpoints and no turn
  holds a connection across a model call.
* **Fenced writes.** ``aput`` and ``aput_writes`` run in a transaction that first checks the
  current turn's lease (:mod:`graph.store.leases`): a turn that lost its thread cannot write a
  checkpoint over its successor's. Outside a turn (Studio's own runs) there is no lease to check.

Deserialization is restricted to LangGraph's safe types (:mod:`graph.store.checkpoint_guard`); a
refused blob is audited once, then raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from tollgate.graph.store import leases
from tollgate.graph.store.checkpoint_guard import CheckpointRefused, StrictSerializer, assert_strict, audit_refusal
from tollgate.graph.store.db import Database

__all__ = ["TollgateSaver", "open_checkpointer", "strict_serializer"]


def strict_serializer() -> JsonPlusSerializer:
    """Msgpack restricted to LangGraph's safe types; no pickle fallback, ever.

    Tollgate state holds only JSON values and LangChain messages, all in the safe list.
    """
    serde = StrictSerializer()
    assert_strict(serde)
    return serde


class _SyncOnExit:
    """The pipeline handle given to LangGraph's saver inside a fenced block: its ``sync`` waits for the block.

    The saver syncs its pipeline after each operation; inside :func:`graph.store.leases.fenced_pipeline`
    the block's exit syncs anyway, and a second Sync is a round trip with nothing in it (one of the
    9 of a read turn: bench P6). Deferring the saver's is safe: psycopg still flushes a pipeline
    whenever a result is read. This leans on how the saver uses its ``pipe`` (only ``sync``, after
    each operation), which LangGraph does not promise: anything else it asks of the stand-in fails
    loudly, and ``tests/test_checkpointer_pipeline.py`` drives every fenced operation through it.
    """

    __slots__ = ()

    async def sync(self) -> None:
        """Nothing now: the fenced block's exit sends the Sync that commits."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"LangGraph's Postgres saver used pipe.{name}: Tollgate's stand-in "
                             "(graph/store/checkpointer.py _SyncOnExit) supports only sync(); update it")


class TollgateSaver(AsyncPostgresSaver):
    """LangGraph's Postgres saver over a pool: a connection per operation, writes fenced by the lease.

    ``thread_id`` contract (as :class:`~langgraph.checkpoint.base.BaseCheckpointSaver`): every
    config names ``configurable.thread_id``; a thread id is a storage key, never a grant of
    access (the runner checks ownership before any operation of a turn).
    """

    def __init__(self, pool: AsyncConnectionPool[AsyncConnection[DictRow]], *, serde: JsonPlusSerializer) -> None:
        super().__init__(conn=pool, serde=serde)
        self.pool = pool

    @asynccontextmanager
    async def _on_connection(self, *, fenced: bool) -> AsyncIterator[AsyncPostgresSaver]:
        """LangGraph's saver bound to one pooled connection for one operation (fenced: see :func:`graph.store.leases.fenced`)."""
        if not fenced:
            async with self.pool.connection() as conn:
                yield AsyncPostgresSaver(conn=conn, serde=self.serde)
            return
        async with leases.fenced_pipeline(self.pool) as (conn, _pipeline):
            # On the pipeline the fence check is queued in, LangGraph's statements go with the
            # check; the block's own exit sends the one Sync: one round trip, one transaction.
            yield AsyncPostgresSaver(conn=conn, pipe=_SyncOnExit(), serde=self.serde)  # type: ignore[arg-type]

    async def _audited(self, config: RunnableConfig | None, exc: CheckpointRefused) -> None:
        await audit_refusal(self.pool, config, exc)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        try:
            async with self._on_connection(fenced=False) as saver:
                return await saver.aget_tuple(config)
        except CheckpointRefused as exc:
            await self._audited(config, exc)
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
            async with self._on_connection(fenced=False) as saver:
                async for item in saver.alist(config, filter=filter, before=before, limit=limit):
                    yield item
        except CheckpointRefused as exc:
            await self._audited(config, exc)
            raise

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        async with self._on_connection(fenced=True) as saver:
            return await saver.aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        async with self._on_connection(fenced=True) as saver:
            await saver.aput_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        async with self._on_connection(fenced=True) as saver:
            await saver.adelete_thread(thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        async with self._on_connection(fenced=False) as saver:
            await saver.aprune(thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Any:
        async with self._on_connection(fenced=False) as saver:
            return await saver.aget_delta_channel_history(config=config, channels=channels)


async def open_checkpointer(
    db: Database, *, setup: bool = True, serde: JsonPlusSerializer | None = None
) -> TollgateSaver:
    """A checkpointer over the database's pool; ``setup`` applies its own migrations.

    Start-up refuses a permissive ``serde`` (pickle, extra modules, JSON constructors); a blob
    that asks for anything outside the safe types is refused on load and audited.
    """
    serde = serde if serde is not None else strict_serializer()
    assert_strict(serde)
    if setup:
        await _set_up_one_at_a_time(db, serde)
    return TollgateSaver(db.pool, serde=serde)


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
    async with db.admin() as conn:  # schema changes: the privileged role, never the pool's
        while not await _try_lock(conn, _SETUP_LOCK_KEY):
            await asyncio.sleep(0.05)
        try:
            await AsyncPostgresSaver(conn=conn, serde=serde).setup()
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_SETUP_LOCK_KEY,))
