"""The database module: embedded server, migrations, strict checkpointer."""

from __future__ import annotations

from graph.checkpointer import open_checkpointer, strict_serializer
from graph.db import Database, apply_migrations
from graph.migrations import MIGRATIONS, SUMMARIES


async def test_migrations_are_applied_once_and_versioned(db: Database) -> None:
    async with db.pool.connection() as conn:
        assert await apply_migrations(conn) == len(MIGRATIONS) - 1
        cur = await conn.execute("SELECT version, summary FROM tollgate_migrations ORDER BY version")
        rows = await cur.fetchall()
    assert [r["version"] for r in rows] == list(range(1, len(MIGRATIONS)))
    assert [r["summary"] for r in rows] == list(SUMMARIES[1:])
    assert len(SUMMARIES) == len(MIGRATIONS)


async def test_checkpointer_refuses_pickle_and_sets_up(db: Database) -> None:
    serde = strict_serializer()
    assert serde.pickle_fallback is False
    saver = await open_checkpointer(db)
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM checkpoint_migrations")
        row = await cur.fetchone()
    assert row is not None and row["n"] > 0
    assert saver.serde is not None
