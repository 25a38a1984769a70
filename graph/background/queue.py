"""The job queue: procrastinate on our PostgreSQL, its schema, and deferring jobs in our transactions.

Procrastinate's schema is applied at start-up from the pinned library's own ``schema.sql``
(:class:`procrastinate.schema.SchemaManager`), under an advisory lock so any number of API
servers and workers may start at once. ``queue_schema`` (migration 0004) records the version
installed; a process whose pinned procrastinate differs refuses to start rather than run
against a schema it does not know (upgrade: apply procrastinate's migrations, then update the
row). We do not copy the library's SQL into our migrations: its file stays the one source.

Jobs are deferred on *our* connection, inside the transaction that changes the run, so a run
row and its job commit together or not at all.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any, Final

import procrastinate
from procrastinate import exceptions as pexc
from procrastinate.schema import SchemaManager
from psycopg import AsyncConnection

from tollgate.graph.store.db import Database
from tollgate.policies.errors import Unavailable

__all__ = [
    "MAX_ATTEMPTS",
    "RECOVER_STALLED",
    "RUN_DECIDE",
    "RUN_START",
    "RUN_TASKS",
    "TICK_TASKS",
    "EVALUATE_TRIGGERS",
    "EXPIRE_APPROVALS",
    "FIRE_REMINDERS",
    "defer_run_job",
    "ensure_queue_schema",
    "queue_version",
]

RUN_START: Final = "tollgate.run_start"
"""Job that starts a run's turn."""
RUN_DECIDE: Final = "tollgate.run_decide"
"""Job that resumes a run with an approval decision."""
RECOVER_STALLED: Final = "tollgate.recover_stalled"
"""Periodic job: hand the jobs of dead workers to live ones."""
EVALUATE_TRIGGERS: Final = "tollgate.evaluate_triggers"
"""Periodic job: fire trigger rules."""
FIRE_REMINDERS: Final = "tollgate.fire_reminders"
"""Periodic job: deliver due reminders."""
EXPIRE_APPROVALS: Final = "tollgate.expire_approvals"
"""Periodic job: close approvals past their expiry; reconcile threads whose turn died."""
RUN_TASKS: Final = frozenset({RUN_START, RUN_DECIDE})
"""The jobs that drive a run."""
TICK_TASKS: Final = (RECOVER_STALLED, EVALUATE_TRIGGERS, FIRE_REMINDERS, EXPIRE_APPROVALS)
"""The periodic jobs."""
MAX_ATTEMPTS: Final = 3
"""A run's job is tried this many times (crashes included) before the run fails."""

_SCHEMA_LOCK_KEY: Final = 0x746F6C71  # "tolq"
_ready: set[str] = set()

# Deferring needs no pool of its own: every defer passes our connection explicitly.
_deferrer = procrastinate.App(connector=procrastinate.PsycopgConnector())


def queue_version() -> str:
    """The installed procrastinate version (the schema this build expects)."""
    return importlib.metadata.version("procrastinate")


async def ensure_queue_schema(db: Database) -> None:
    """Install procrastinate's schema once per database; refuse a schema of another version."""
    if db.url in _ready:
        return
    wanted = queue_version()
    async with db.admin() as conn, conn.transaction():  # schema changes: the privileged role
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
        cur = await conn.execute("SELECT version FROM queue_schema WHERE name = 'procrastinate'")
        row = await cur.fetchone()
        if row is None:
            exists = await conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL AS present")
            present = await exists.fetchone()
            if present is not None and present["present"]:
                raise Unavailable("job queue (procrastinate tables exist but queue_schema has no version row)")
            await conn.execute(SchemaManager.get_schema(), prepare=False)
            await conn.execute(
                "INSERT INTO queue_schema (name, version) VALUES ('procrastinate', %s)", (wanted,)
            )
        elif row["version"] != wanted:
            raise Unavailable(
                f"job queue (schema is procrastinate {row['version']!r}, this build needs {wanted!r}: "
                "apply procrastinate's migrations first)"
            )
    _ready.add(db.url)


async def defer_run_job(
    conn: AsyncConnection[Any], task: str, *, run_id: str, owner_id: str, **kwargs: Any
) -> int | None:
    """Defer a run job on ``conn`` (inside the caller's transaction); ``None`` if one is already queued.

    ``lock`` keyed by owner: procrastinate never runs two jobs with the same lock at once, so
    one owner has at most one running run. ``queueing_lock`` keyed by run: one queued job per run.
    """
    deferrer = _deferrer.configure_task(
        task, lock=f"owner:{owner_id}", queueing_lock=f"run:{run_id}", connection=conn
    )
    try:
        async with conn.transaction():  # a savepoint: a duplicate must not abort the caller's transaction
            return await deferrer.defer_async(run_id=run_id, **kwargs)
    except pexc.AlreadyEnqueued:
        return None
