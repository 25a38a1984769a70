"""Row-level security's owner: whose rows one transaction may see (migration 0017).

The tool and approval tables carry a policy that admits a row only when its ``owner_id`` equals
the transaction's ``tollgate.owner`` setting, so a query that forgets its ``WHERE owner_id``
returns, changes and adds nothing of another owner's: the query's own filter stays the first
guard, and this is the second. The setting is transaction-local (``set_config(..., true)``) and
so never outlives the transaction on a pooled connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

from psycopg import AsyncConnection
from psycopg.pq import PipelineStatus, TransactionStatus
from psycopg_pool import AsyncConnectionPool

__all__ = ["ALL_OWNERS", "all_owners", "owner_reads", "owner_transaction", "scope"]

ALL_OWNERS: Final = "*"
"""The scope of the scheduler's cross-owner scans; never a valid owner id (``graph.state``)."""


async def scope(conn: AsyncConnection[Any], owner_id: str) -> None:
    """Admit ``owner_id``'s rows (only) for the rest of ``conn``'s current transaction.

    Refuses (``RuntimeError``) on an autocommit connection outside a transaction or pipeline,
    where the setting would end with the statement that set it and every later query would see
    nothing: that is a bug in the caller, not an empty result. Refuses an empty owner.
    """
    if not owner_id:
        raise ValueError("an owner scope needs an owner id")
    if (conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE
            and conn.info.pipeline_status == PipelineStatus.OFF):
        raise RuntimeError("an owner scope needs a transaction (or a pipeline) to live in")
    await conn.execute("SELECT set_config('tollgate.owner', %s, true)", (owner_id,))


async def all_owners(conn: AsyncConnection[Any]) -> None:
    """Admit every owner's rows for the rest of the transaction: for the scheduler's scans only
    (expiring approvals, due reminders, matching triggers), which then act per owner."""
    await scope(conn, ALL_OWNERS)


@asynccontextmanager
async def owner_transaction(
    pool: AsyncConnectionPool[Any], owner_id: str
) -> AsyncIterator[AsyncConnection[Any]]:
    """A pooled connection inside a transaction scoped to ``owner_id``; commits on a clean exit."""
    async with pool.connection() as conn, conn.transaction():
        await scope(conn, owner_id)
        yield conn


@asynccontextmanager
async def owner_reads(pool: AsyncConnectionPool[Any], owner_id: str) -> AsyncIterator[AsyncConnection[Any]]:
    """A pooled connection for reads of ``owner_id``'s rows, in a pipeline: the scope rides with
    the first statement, and the pipeline's Sync ends the implicit transaction (one round trip
    more than an unscoped read, where a BEGIN and a COMMIT would be three)."""
    async with pool.connection() as conn, conn.pipeline():
        await scope(conn, owner_id)
        yield conn
