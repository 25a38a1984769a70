"""Counting client round trips to PostgreSQL exactly, with libpq's own protocol trace.

:func:`open_counted_database` opens a :class:`~graph.store.db.Database` whose pool traces every
connection it creates (``PQtrace``, one file per connection) while a :class:`RoundTrips`
window is open. A round trip is one wait of the client for the server: a run of frontend
messages (``F``) followed by backend messages (``B``). A pipelined batch (the checkpointer's
``executemany`` of blobs plus its checkpoint row) is one round trip; a statement psycopg
prepares first is two (``Parse``/``Sync``, then ``Bind``/``Execute``/``Sync``), as on the wire.
A reply the client reads while it is still sending the same pipeline (an early statement's
``Sync`` answered before the last one is sent) counts as one more: the count can be over, never under.
Only the benchmark uses this pool; the product's pool is untouched.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from psycopg import AsyncConnection, pq
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from tollgate.graph.store.db import Database

__all__ = ["RoundTrips", "open_counted_database"]


def _round_trips(path: Path) -> int:
    """F→B transitions in one connection's trace."""
    trips = 0
    previous = ""
    with path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            side = line[:1]
            if side == "B" and previous == "F":
                trips += 1
            if side in ("F", "B"):
                previous = side
    return trips


@dataclass
class RoundTrips:
    """The connections of a counted pool, and the trace files of the current window."""

    directory: Path
    """Where the per-connection trace files go."""
    connections: list[AsyncConnection[Any]] = field(default_factory=list)
    """Every connection the pool created."""
    files: list[tuple[IO[str], Path]] = field(default_factory=list)
    """Open trace files of the current window."""
    tracing: bool = False
    """Whether a window is open (new connections start tracing at once)."""

    def _trace(self, conn: AsyncConnection[Any]) -> None:
        path = self.directory / f"conn-{len(self.files)}.trace"
        handle = path.open("w", encoding="utf-8")
        self.files.append((handle, path))
        conn.pgconn.trace(handle.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    async def configure(self, conn: AsyncConnection[Any]) -> None:
        """The pool's ``configure`` hook."""
        self.connections.append(conn)
        if self.tracing:
            self._trace(conn)

    @contextmanager
    def window(self) -> Iterator[list[int]]:
        """Trace every connection inside the block; the yielded list gets the total round trips on exit.

        Call it only while no statement is in flight (between turns).
        """
        total: list[int] = []
        self.tracing = True
        for conn in self.connections:
            if not conn.closed:
                self._trace(conn)
        try:
            yield total
        finally:
            self.tracing = False
            for conn in self.connections:
                if not conn.closed:
                    conn.pgconn.untrace()  # flushes libpq's buffer
            for handle, _ in self.files:
                handle.close()
            total.append(sum(_round_trips(path) for _, path in self.files))
            for _, path in self.files:
                path.unlink(missing_ok=True)
            self.files.clear()


@asynccontextmanager
async def open_counted_database(url: str, *, max_size: int = 10) -> AsyncIterator[tuple[Database, RoundTrips]]:
    """A :class:`Database` on ``url`` (already migrated) whose round trips can be counted."""
    with tempfile.TemporaryDirectory(prefix="tollgate-trace-") as tmp:
        counter = RoundTrips(directory=Path(tmp))
        # The same connection options as graph.store.db.open_database, so the statements are the same.
        pool: AsyncConnectionPool[AsyncConnection[dict[str, Any]]] = AsyncConnectionPool(
            url, min_size=1, max_size=max_size, open=False, configure=counter.configure,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        )
        await pool.open(wait=True, timeout=30)
        try:
            yield Database(url=url, pool=pool), counter
        finally:
            await pool.close()
