"""The server never connects as a role that can change the schema or rewrite the audit log.

(The whole test suite serves as such a role too: ``tests/conftest.py`` migrates as the
superuser and hands the app a member of ``tollgate_app``.)

Both also hold row-level security: a query that forgets its owner sees nothing of another's
(``tests/test_row_security.py``).

Embedded (no ``DATABASE_URL``): migrations run as the embedded server's superuser, the pool as
``tollgate_serve``, a member of ``tollgate_app``. External: the pool as ``DATABASE_URL``'s user,
migrations on ``TOLLGATE_MIGRATION_DATABASE_URL`` (the session's server stands in for one, with a
serving login of the test's own).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tollgate.graph.app import open_app
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store.db import SERVING_ROLE, Database, RowSecurityOff, open_database
from tollgate.graph.store.embedded import stop
from tests.test_row_security import unscoped_queries_see_nothing

_REFUSED = [
    "UPDATE audit_log SET reason = 'rewritten'",
    "DELETE FROM audit_log",
    "TRUNCATE audit_log",
    "ALTER TABLE audit_log DISABLE TRIGGER audit_log_no_change",
    "DROP TABLE threads",
    "ALTER TABLE approvals ADD COLUMN sneaky text",
    "CREATE TABLE sneaky (id int)",
    "DROP TRIGGER audit_log_no_change ON audit_log",
    "ALTER TABLE approvals DISABLE ROW LEVEL SECURITY",
    "ALTER TABLE mail_messages NO FORCE ROW LEVEL SECURITY",
    "DROP POLICY owner_scope ON calendar_events",
    "CREATE POLICY everything ON tasks USING (true)",
]


async def _serving_role_is_least_privileged(db: Database, role: str) -> None:
    async with db.pool.connection() as conn:
        row = await (await conn.execute("SELECT current_user AS who, usesuper FROM pg_user WHERE usename = current_user")).fetchone()
        assert row == {"who": role, "usesuper": False}
        for statement in _REFUSED:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await conn.execute(statement)
        # Turning row security off for the session does not bypass it: the query is refused.
        await conn.execute("SET row_security = off")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            await conn.execute("SELECT count(*) FROM tasks")
        await conn.execute("RESET row_security")
        # What it must do, it can: use the tables, append to the audit log.
        thread = f"lp-{secrets.token_hex(4)}"
        await conn.execute("INSERT INTO threads (thread_id, owner_id) VALUES (%s, 'o_lp')", (thread,))
        await conn.execute("DELETE FROM threads WHERE thread_id = %s", (thread,))
        assert (await (await conn.execute("SELECT count(*) AS n FROM audit_log")).fetchone()) is not None


@pytest.fixture
async def embedded(settings: Settings, tmp_path: Path) -> AsyncIterator[Settings]:
    """Settings as on a fresh clone: no DATABASE_URL, the embedded server under a data directory of the test's own."""
    data_dir = tmp_path / "var"
    try:
        yield settings.model_copy(update={"database_url": None, "migration_database_url": None, "data_dir": data_dir})
    finally:
        stop(data_dir)


async def test_the_embedded_setup_serves_as_tollgate_serve(embedded: Settings) -> None:
    async with open_database(embedded) as db:
        await _serving_role_is_least_privileged(db, SERVING_ROLE)
        await unscoped_queries_see_nothing(db, "o_lp_a", "o_lp_b")


async def test_a_whole_app_runs_as_the_serving_role(embedded: Settings) -> None:
    """Start-up's schema work (ours, the checkpointer's, tools') goes to the privileged role; turns run."""
    async with open_app(embedded) as app:
        out = await app.runner.send(Context(owner_id="o_lp", timezone="UTC"), "lp-thread", "what's on my calendar today?")
        assert out.outcome in ("read", "reply")
        await _serving_role_is_least_privileged(app.services.db, SERVING_ROLE)


async def test_an_external_server_serves_as_database_urls_user_and_migrates_as_the_other(
    settings: Settings, admin_db: Database
) -> None:
    role = f"tollgate_serve_{secrets.token_hex(3)}"
    async with admin_db.pool.connection() as conn:
        await conn.execute(sql.SQL("CREATE ROLE {} LOGIN INHERIT IN ROLE tollgate_app").format(sql.Identifier(role)))
    try:
        external = settings.model_copy(update={"database_url": make_conninfo(admin_db.url, user=role),
                                               "migration_database_url": admin_db.url})
        async with open_database(external) as served:
            await _serving_role_is_least_privileged(served, role)
            mine = "o_" + secrets.token_hex(6)
            await unscoped_queries_see_nothing(served, mine, mine + "_b")
    finally:
        async with admin_db.pool.connection() as conn:
            await conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


async def test_a_superuser_database_url_serves_as_tollgate_app_with_row_security_on(
    settings: Settings, database_url: str
) -> None:
    """The usual external set-up, ``DATABASE_URL`` naming ``postgres``: row-level security does not bind
    a superuser, so every pooled connection drops to ``tollgate_app`` (once, every owner's rows showed)."""
    external = settings.model_copy(update={"database_url": database_url, "migration_database_url": None})
    async with open_database(external, migrate=False) as served:
        async with served.pool.connection() as conn:
            row = await (await conn.execute("SELECT current_user AS who, session_user AS login")).fetchone()
        assert row is not None and row["who"] == "tollgate_app" and row["who"] != row["login"]
        mine = "o_" + secrets.token_hex(6)
        await unscoped_queries_see_nothing(served, mine, mine + "_b")


async def test_a_bypassrls_role_that_cannot_drop_to_tollgate_app_is_refused_by_name(
    settings: Settings, admin_db: Database
) -> None:
    role = f"tollgate_bypass_{secrets.token_hex(3)}"
    async with admin_db.pool.connection() as conn:
        await conn.execute(sql.SQL("CREATE ROLE {} LOGIN BYPASSRLS").format(sql.Identifier(role)))
        await conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(sql.Identifier(role)))
    try:
        external = settings.model_copy(update={"database_url": make_conninfo(admin_db.url, user=role),
                                               "migration_database_url": admin_db.url})
        with pytest.raises(RowSecurityOff, match=role) as refused:
            async with open_database(external, migrate=False):
                pass
        assert "approvals" in refused.value.tables and "CREATE ROLE tollgate_serve" in str(refused.value)
    finally:
        async with admin_db.pool.connection() as conn:
            await conn.execute(sql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {}").format(sql.Identifier(role)))
            await conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
