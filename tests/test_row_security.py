"""Row-level security on the tool and approval tables (migration 0017, ``graph.store.owner_scope``).

The app role (the whole suite serves as one: ``tests/conftest.py``) sees another owner's rows
of these tables in no transaction: a query that forgets its ``WHERE owner_id`` returns only the
scoped owner's rows, or none when no owner is set. The same checks run on the embedded setup
and on an external ``DATABASE_URL`` in ``tests/test_least_privilege.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from tollgate.graph.store.db import Database, apply_tool_migrations
from tollgate.graph.store.owner_scope import ALL_OWNERS, owner_transaction, scope
from tollgate_bookmarks import BOOKMARKS
from tollgate.tools.demo import seed_demo
from tollgate.tools.registry import Registry

from tests.conftest import NOW

OWNER_TABLES = frozenset({
    "approvals", "effects", "calendar_events", "mail_messages", "mail_outbox", "tasks", "reminders", "notes",
    "owner_credentials",
})
"""The tables whose rows are one owner's data of a tool or an approval."""

# Tables with an owner_id column that are not tool data or approvals: each is read by a query
# that already names its owner, through surfaces that authenticate first (threads and their
# events, tokens, runs, rules, usage, profiles) or by the append-only, hash-chained audit log.
NOT_ROW_SCOPED = frozenset({
    "threads", "api_tokens", "turn_events", "audit_log", "background_runs", "trigger_rules", "model_usage",
    "owner_profiles",
})


async def _seed(db: Database, *owners: str) -> None:
    for owner in owners:
        async with owner_transaction(db.pool, owner) as conn:
            await seed_demo(conn, owner, NOW, "Europe/Paris")


async def unscoped_queries_see_nothing(db: Database, mine: str, theirs: str) -> None:
    """The checks, on any database the app serves from (the embedded one, an external one)."""
    await _seed(db, mine, theirs)
    async with db.pool.connection() as conn:  # unscoped on purpose: that rows stay hidden is the check
        for table in sorted(OWNER_TABLES):
            cur = await conn.execute(f"SELECT count(*) AS n FROM {table}")  # noqa: S608 - our own table names
            assert (await cur.fetchone()) == {"n": 0}, f"{table} shows rows to a query with no owner"
    async with owner_transaction(db.pool, mine) as conn:
        cur = await conn.execute("SELECT DISTINCT owner_id FROM calendar_events")  # no WHERE: only mine
        assert [r["owner_id"] for r in await cur.fetchall()] == [mine]
        cur = await conn.execute("SELECT DISTINCT owner_id FROM mail_messages")
        assert [r["owner_id"] for r in await cur.fetchall()] == [mine]
        # An update or a delete that forgets its owner changes nothing of another's.
        await conn.execute("UPDATE tasks SET title = 'overwritten'")
        await conn.execute("DELETE FROM reminders")
    async with owner_transaction(db.pool, theirs) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM tasks WHERE title = 'overwritten'")
        assert (await cur.fetchone()) == {"n": 0}
        cur = await conn.execute("SELECT count(*) AS n FROM reminders")
        assert (await cur.fetchone())["n"] > 0  # type: ignore[index]
    # Nor may it write a row for another owner.
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
        async with owner_transaction(db.pool, mine) as conn:
            await conn.execute("INSERT INTO mail_outbox (id, owner_id, to_addrs, subject, body)"
                               " VALUES ('msg_x', %s, '{a@example.com}', 's', 'b')", (theirs,))


async def test_a_query_that_forgets_its_owner_returns_nothing_of_anothers(db: Database, owner: str) -> None:
    await unscoped_queries_see_nothing(db, owner, owner + "_other")


async def test_every_owner_table_is_row_scoped_and_none_is_forgotten(admin_db: Database) -> None:
    """A new table with an ``owner_id`` column must take a side: row-scoped, or named above as not tool data."""
    await apply_tool_migrations(admin_db, Registry([BOOKMARKS]))
    async with admin_db.pool.connection() as conn:
        cur = await conn.execute(
            """SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c
               JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'owner_id' AND NOT a.attisdropped
               WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace"""
        )
        rows = {r["relname"]: (r["relrowsecurity"], r["relforcerowsecurity"]) for r in await cur.fetchall()}
    scoped = {name for name, (on, forced) in rows.items() if on and forced}
    assert OWNER_TABLES <= scoped
    plugin_tables = {name for name in scoped - OWNER_TABLES if name.startswith("example_")}
    assert scoped - OWNER_TABLES == plugin_tables  # the bookmarks example opts in too (its migration)
    assert set(rows) - scoped == NOT_ROW_SCOPED


async def test_a_scope_outside_a_transaction_is_a_bug_not_an_empty_result(db: Database, owner: str) -> None:
    async with db.pool.connection() as conn:
        with pytest.raises(RuntimeError, match="transaction"):
            await scope(conn, owner)
        with pytest.raises(ValueError):
            async with conn.transaction():
                await scope(conn, "")


async def test_the_scope_ends_with_its_transaction_on_a_pooled_connection(db: Database, owner: str) -> None:
    await _seed(db, owner)
    async with db.pool.connection() as conn:
        async with conn.transaction():
            await scope(conn, owner)
            cur = await conn.execute("SELECT count(*) AS n FROM tasks")
            assert (await cur.fetchone())["n"] > 0  # type: ignore[index]
        cur = await conn.execute("SELECT count(*) AS n FROM tasks")  # same connection, next transaction
        assert (await cur.fetchone()) == {"n": 0}


async def test_only_the_schedulers_scope_sees_every_owner(db: Database, owner: str) -> None:
    await _seed(db, owner, owner + "_b")
    async with owner_transaction(db.pool, ALL_OWNERS) as conn:
        cur = await conn.execute("SELECT count(DISTINCT owner_id) AS n FROM tasks WHERE owner_id LIKE %s",
                                 (owner + "%",))
        assert (await cur.fetchone()) == {"n": 2}


async def test_a_plugin_tables_rows_are_scoped_the_same_way(db: Database, owner: str) -> None:
    """The bookmarks example's migration opts its table in (``tollgate_owner_rls``)."""
    await apply_tool_migrations(db, Registry([BOOKMARKS]))
    async with owner_transaction(db.pool, owner + "_b") as conn:
        await conn.execute("INSERT INTO example_bookmarks (id, owner_id, title, url, created_at)"
                           " VALUES (%s, %s, 't', 'https://example.com', now())", ("bm_" + owner, owner + "_b"))
    async with owner_transaction(db.pool, owner) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM example_bookmarks WHERE id = %s", ("bm_" + owner,))
        assert (await cur.fetchone()) == {"n": 0}


_UNSCOPED_CONNECTION = re.compile(r"\bpool\.connection\(\)")
_SCOPED = re.compile(r"set_config\('tollgate\.owner'|\bscope\(conn|unscoped on purpose")


def unscoped_owner_counts(source: str) -> list[int]:
    """Lines of ``source`` that open a pool connection with no owner scope and, within the next few
    lines, read an owner-scoped table: row-level security shows such a query nothing, so an
    assertion that it finds nothing cannot fail."""
    lines = source.splitlines()
    found = []
    for number, line in enumerate(lines):
        if not _UNSCOPED_CONNECTION.search(line):
            continue
        block = "\n".join(lines[number : number + 8])
        if _SCOPED.search(block):
            continue
        if any(re.search(rf"\b(?:FROM|UPDATE|JOIN)\s+{table}\b", block) for table in OWNER_TABLES):
            found.append(number + 1)
    return found


def test_no_test_reads_owner_rows_on_a_connection_without_an_owner_scope() -> None:
    """Helpers that count "nothing happened" must see the rows (``tests.conftest.all_rows``)."""
    here = Path(__file__).resolve().parent
    offenders = {p.name: lines for p in sorted(here.glob("*.py")) if (lines := unscoped_owner_counts(p.read_text()))}
    assert offenders == {}


def test_the_unscoped_count_check_catches_the_old_helper() -> None:
    opened = "db.pool." + "connection()"  # spelt apart, so this file passes its own check
    old = (f'async with {opened} as conn:\n'
           '    cur = await conn.execute("SELECT count(*) AS n FROM mail_outbox WHERE owner_id = %s", (owner,))\n')
    assert unscoped_owner_counts(old) == [1]
    assert unscoped_owner_counts(old.replace(opened, "all_rows(db)")) == []
