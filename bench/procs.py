"""Processes the benchmarks start: Tollgate's own server and workers, and ``langgraph dev``.

Every process gets the benchmark database, a clean environment (nothing inherited that could
point it at a model endpoint or a tracing service; analytics and version checks off), listens
on 127.0.0.1 only, and is stopped by its own process group id when the block ends.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from graph._env import stop_group

__all__ = ["ROOT", "STUDIO_LANGGRAPH", "free_port", "started", "tollgate_command"]

ROOT = Path(__file__).resolve().parent.parent
"""The repository root."""
STUDIO_LANGGRAPH = ROOT / ".venv-studio" / "bin" / "langgraph"
"""``langgraph dev`` lives in its own environment (see the Makefile)."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def started(
    argv: Sequence[str], env: dict[str, str], log: Path, *, ready_url: str | None = None, cwd: Path = ROOT,
    timeout: float = 120.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``argv`` in its own process group (output to ``log``); wait for ``ready_url`` to answer 200.

    The process (and anything it started) is stopped with SIGTERM, then SIGKILL, on exit.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        if ready_url is not None:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"{argv[0]} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
                try:
                    if httpx.get(ready_url, timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{argv[0]} did not answer on {ready_url}:\n{log.read_text()[-3000:]}")
                time.sleep(0.1)
        yield proc
    finally:
        stop_group(proc, grace=40)


def tollgate_command(*args: str) -> list[str]:
    """The ``tollgate`` command of this environment, with ``args``."""
    return [str(Path(sys.executable).parent / "tollgate"), *args]
