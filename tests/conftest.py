"""Shared fixtures: one real PostgreSQL per test session (embedded, or ``DATABASE_URL``)."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any

import tollgate.graph._env  # noqa: F401  - strict msgpack and no telemetry before langgraph loads
import pytest

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from tollgate.graph.process import event_loop
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database, embedded_url, open_database

# Every test loop is the loop every Tollgate process runs on (uvloop). A policy rather than
# pytest-asyncio's loop-factory hook: the hook parametrizes only async tests, so a sync test with
# async fixtures would get a second session loop and tear the first one's fixtures down.
asyncio.set_event_loop_policy(event_loop.Policy())

# Tests serve the built-in tools unless they say otherwise: the example plug-in installed in
# this environment (examples/bookmarks) is served only by the tests about plug-ins, which set
# this back for their own processes.
os.environ["TOLLGATE_TOOL_ENTRY_POINTS"] = "false"

# Children take Ctrl-C as a terminal's foreground program does, however the run was started: a
# run started as a background job ignores SIGINT, and an ignored signal stays ignored across
# ``exec`` (the chat would never see the Ctrl-C its tests press); a handled one starts at its default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real PostgreSQL server: ``DATABASE_URL`` if set, else an embedded one for this session."""
    external = os.environ.get("DATABASE_URL")
    if external:
        yield external
        return
    data_dir = tmp_path_factory.mktemp("postgres")
    yield embedded_url(data_dir, delete_on_exit=True)


_SERVING_ROLE = "tollgate_serve_tests"


def _serving_url(database_url: str) -> str:
    """Migrate the session database as its superuser, then serve it as a least-privileged login
    (a member of ``tollgate_app``), as a deployment should: every test runs the app without DDL
    and without the right to rewrite the audit log."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    from tollgate.graph.store.db import apply_migrations_sync

    apply_migrations_sync(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        try:
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (_SERVING_ROLE,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN INHERIT IN ROLE tollgate_app").format(
                    sql.Identifier(_SERVING_ROLE)))
        except psycopg.errors.InsufficientPrivilege:  # an external DATABASE_URL whose user may not create roles
            return database_url
    return make_conninfo(database_url, user=_SERVING_ROLE)


@pytest.fixture(scope="session")
def settings(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings pointing at the session database (served as a least-privileged role, migrated as
    the privileged one), with a random approval secret."""
    return Settings(
        database_url=_serving_url(database_url),
        migration_database_url=database_url,
        data_dir=tmp_path_factory.mktemp("data"),
        approval_secret=secrets.token_hex(32),
        default_timezone="Europe/Paris",
    )


@pytest.fixture(scope="session")
async def db(settings: Settings) -> AsyncIterator[Database]:
    """The migrated database, shared by the whole session."""
    async with open_database(settings) as database:
        yield database


@pytest.fixture(scope="session")
async def admin_db(settings: Settings, database_url: str) -> AsyncIterator[Database]:
    """The session database as its privileged role, for what only an operator or an attacker with the
    database's keys does (migrate, create roles or databases, tamper with the audit log)."""
    # Not through open_database: that serves only as a role row-level security binds (it would drop
    # this one to tollgate_app), and this fixture is the role that is not bound.
    pool: AsyncConnectionPool[AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
        database_url, min_size=1, max_size=4, open=False,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row})
    await pool.open(wait=True, timeout=30)
    try:
        yield Database(url=database_url, pool=pool, admin_url=database_url)
    finally:
        await pool.close()


@pytest.fixture
def owner() -> str:
    """A fresh owner id, so tests never see each other's rows."""
    return "o_" + secrets.token_hex(6)


from datetime import datetime  # noqa: E402
from zoneinfo import ZoneInfo  # noqa: E402

from tollgate.graph.runner import TurnRunner  # noqa: E402
from tollgate.graph.services import Services  # noqa: E402
from tollgate.graph.state import Context  # noqa: E402
from tollgate.graph.store.checkpointer import open_checkpointer  # noqa: E402
from tollgate.graph.store.owner_scope import owner_transaction  # noqa: E402
from tollgate.graph.turn import build_graph  # noqa: E402
from tests.fakes import ScriptedModel  # noqa: E402
from tests.openai_stub import StubServer, stub_server  # noqa: E402
from tests.harness import Clock, Turns  # noqa: E402
from tollgate.graph.background.offer import BACKGROUND  # noqa: E402
from tollgate.tools.builtin import default_registry  # noqa: E402
from tollgate.tools.registry import Registry  # noqa: E402
from tollgate.tools.demo import seed_demo  # noqa: E402

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=ZoneInfo("Europe/Paris"))
"""The fixed server time of graph tests (a Monday)."""


@pytest.fixture
def clock() -> Clock:
    """A settable clock starting at :data:`NOW`."""
    return Clock(NOW)


@pytest.fixture
def stub() -> Iterator[StubServer]:
    """A loopback OpenAI-compatible model server answering from its script (tests/openai_stub.py)."""
    with stub_server() as server:
        yield server


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    """The scripted picker model; fails the test if scripted steps were left over."""
    scripted = ScriptedModel(steps=[])
    yield scripted
    scripted.assert_complete()


@pytest.fixture
async def services(settings: Settings, db: Database, model: ScriptedModel, clock: Clock) -> Services:
    """Services over the session database, the built-in registry and the scripted model."""
    # The built-ins and the runtime's background offer, as graph.app registers them for a process.
    registry = Registry((*default_registry().tools, BACKGROUND))
    return Services(settings=settings, db=db, registry=registry, picker_model=model, clock=clock)


@pytest.fixture
async def turns(services: Services, db: Database) -> Turns:
    """A runner over the real compiled graph with the Postgres checkpointer."""
    saver = await open_checkpointer(db)
    return Turns(TurnRunner(build_graph(services, checkpointer=saver), services))


@pytest.fixture
async def ctx(owner: str, db: Database) -> Context:
    """The run context of a fresh owner whose demo data is seeded."""
    async with owner_transaction(db.pool, owner) as conn:
        await seed_demo(conn, owner, NOW, "Europe/Paris")
    return Context(owner_id=owner, timezone="Europe/Paris", channel="chat")


from tests.server_harness import api, demo_token, live_server  # noqa: E402, F401  - HTTP fixtures (uvicorn on loopback)


@pytest.fixture(scope="session")
def bg_settings(settings: Settings) -> Settings:
    """The session settings with worker timings fast enough for tests (stall after 2 s, 1 s ticks,
    and a thread lease that runs out before a stalled worker is presumed dead)."""
    return settings.model_copy(update={
        "worker_poll_seconds": 0.2, "worker_heartbeat_seconds": 0.3, "worker_stall_seconds": 2.0,
        "scheduler_tick_seconds": 1, "worker_concurrency": 2, "thread_lease_seconds": 1.5,
    })


from contextlib import asynccontextmanager  # noqa: E402


@asynccontextmanager
async def all_rows(db: Database) -> AsyncIterator[AsyncConnection[Any]]:
    """A connection of the app's pool in a transaction that sees every owner's rows (the
    scheduler's scope, ``graph.store.owner_scope.ALL_OWNERS``): for a test's own set-up and checks,
    whose queries name their owner. Row-level security itself is tested in ``test_row_security``."""
    from tollgate.graph.store.owner_scope import ALL_OWNERS

    async with owner_transaction(db.pool, ALL_OWNERS) as conn:
        yield conn


@pytest.fixture
async def conn(db: Database) -> AsyncIterator[AsyncConnection[Any]]:
    """A connection inside a transaction that is rolled back after the test, seeing every owner's
    rows: the tools' tests check the tools' own owner filters, row security aside."""
    from tollgate.graph.store.owner_scope import ALL_OWNERS, scope

    async with db.pool.connection() as conn, conn.transaction(force_rollback=True):
        await scope(conn, ALL_OWNERS)
        yield conn
