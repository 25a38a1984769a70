"""The connection pool, and how it behaves while the database is away.

psycopg's pool waits up to its ``timeout`` for a connection, trying to open new ones in the
background. That is right under load, wrong in an outage: every request and every step of a
turn would wait the full time, one after another. So the pool watches its own connection
attempts (:class:`Health`): after one failed, and until one succeeds, a caller with no idle
connection waits only :data:`DOWN_WAIT_SECONDS` (long enough for the pool to open one if the
database is back) and gets ``PoolTimeout``, an ``OperationalError`` the HTTP layer answers 503.

Each connection opens with a bounded ``connect_timeout`` (a host that does not answer at all)
and a server-side ``statement_timeout`` (a statement that never ends holds no turn forever).
"""

from __future__ import annotations

import time
from typing import Any, Final

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

__all__ = ["DOWN_WAIT_SECONDS", "Health", "WatchedPool", "open_pool"]

DOWN_WAIT_SECONDS: Final = 1.0
"""How long a caller waits for a connection while the database is known to be away."""


class Health:
    """What the pool's latest connection attempts said of the database."""

    def __init__(self) -> None:
        self.failed_at = 0.0
        self.succeeded_at = 0.0

    @property
    def down(self) -> bool:
        """Whether the latest connection attempt failed."""
        return self.failed_at > self.succeeded_at

    def watch(self) -> type[AsyncConnection[Any]]:
        """A connection class that reports each of its connection attempts here."""
        health = self

        class Watched(AsyncConnection[Any]):
            @classmethod
            async def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:  # type: ignore[override]
                try:
                    conn = await super().connect(conninfo, **kwargs)
                except psycopg.OperationalError:
                    health.failed_at = time.monotonic()
                    raise
                health.succeeded_at = time.monotonic()
                return conn

        return Watched


class WatchedPool(AsyncConnectionPool[AsyncConnection[dict[str, Any]]]):
    """psycopg's pool, which waits only briefly for a connection while its database is away."""

    def __init__(self, conninfo: str, *, health: Health, **kwargs: Any) -> None:
        super().__init__(conninfo, connection_class=health.watch(), **kwargs)
        self.health = health

    async def getconn(self, timeout: float | None = None) -> AsyncConnection[dict[str, Any]]:
        """A connection, as psycopg's pool gives it; while the database is away, after at most
        :data:`DOWN_WAIT_SECONDS` (``PoolTimeout`` otherwise)."""
        if self.health.down:
            timeout = min(timeout if timeout is not None else self.timeout, DOWN_WAIT_SECONDS)
        return await super().getconn(timeout)


def open_pool(url: str, *, max_size: int, wait_seconds: float, connect_seconds: float,
              statement_seconds: float, configure: Any = None) -> WatchedPool:
    """An unopened pool of autocommit, dict-row connections to ``url``."""
    # The URL's own server options are kept; the statement limit is added to them.
    options = f"{conninfo_to_dict(url).get('options', '')} -c statement_timeout={int(statement_seconds * 1000)}"
    return WatchedPool(
        url,
        health=Health(),
        min_size=1,
        max_size=max_size,
        open=False,
        timeout=wait_seconds,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row,
                # libpq takes whole seconds (2 at least); the statement limit is the server's, in ms.
                "connect_timeout": max(2, round(connect_seconds)),
                "options": options.strip()},
        configure=configure,
    )
