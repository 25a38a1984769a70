"""The database module: embedded server, migrations, strict checkpointer."""

from __future__ import annotations

import asyncio
import pickle
import secrets

import pytest

from langgraph.checkpoint.postgres.base import BasePostgresSaver
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tollgate.graph.app import open_app
from tollgate.graph.background.queue import ensure_queue_schema
from tollgate.graph.settings import Settings
from tollgate.graph.store.checkpoint_guard import CheckpointRefused
from tollgate.graph.store.checkpointer import open_checkpointer, strict_serializer
from tollgate.graph.store.db import Database, apply_migrations
from tollgate.graph.store.migrations import MIGRATIONS, SUMMARIES


async def test_migrations_are_applied_once_and_versioned(db: Database) -> None:
    async with db.admin() as conn:  # migrations are the privileged role's
        assert await apply_migrations(conn) == len(MIGRATIONS) - 1
        cur = await conn.execute("SELECT version, summary FROM tollgate_migrations ORDER BY version")
        rows = await cur.fetchall()
    assert [r["version"] for r in rows] == list(range(1, len(MIGRATIONS)))
    assert [r["summary"] for r in rows] == list(SUMMARIES[1:])
    assert len(SUMMARIES) == len(MIGRATIONS)


async def test_checkpointer_refuses_pickle_and_sets_up(db: Database) -> None:
    serde = strict_serializer()
    with pytest.raises(CheckpointRefused):  # a pickle blob never loads
        serde.loads_typed(("pickle", pickle.dumps(1)))
    saver = await open_checkpointer(db)
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM checkpoint_migrations")
        row = await cur.fetchone()
    assert row is not None and row["n"] > 0
    assert saver.serde is not None


async def test_processes_starting_at_once_on_a_fresh_database_all_start(
    db: Database, admin_db: Database, settings: Settings
) -> None:
    """A server and workers started together (``make run``, a deploy) each migrate the same empty
    database: ours, LangGraph's checkpoint tables and the job queue's, every one applied once."""
    name = "fresh_" + secrets.token_hex(4)
    async with admin_db.pool.connection() as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    fresh = settings.model_copy(update={
        "database_url": make_conninfo(str(settings.database_url), dbname=name),
        "migration_database_url": make_conninfo(str(settings.migration_database_url), dbname=name),
    })

    async def start() -> list[int]:
        async with open_app(fresh) as app:
            await ensure_queue_schema(app.services.db)
            async with app.services.db.pool.connection() as conn:
                cur = await conn.execute("SELECT v FROM checkpoint_migrations ORDER BY v")
                return [row["v"] for row in await cur.fetchall()]

    try:
        applied = await asyncio.gather(*(start() for _ in range(4)))
    finally:
        async with admin_db.pool.connection() as conn:
            await conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
    assert applied == [list(range(len(BasePostgresSaver.MIGRATIONS)))] * 4
