"""Processes the benchmarks start: Tollgate's own server and workers, and ``langgraph dev``.

Every process gets the benchmark database, a clean environment (nothing inherited that could
point it at a model endpoint or a tracing service; analytics and version checks off), listens
on 127.0.0.1 only, and is stopped by its own process group id when the block ends.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tollgate.graph._env import stop_group

__all__ = ["ROOT", "STUDIO_LANGGRAPH", "Child", "free_port", "started", "tollgate_command"]

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


@dataclass(frozen=True)
class Child:
    """A process the benchmark started."""

    proc: subprocess.Popen[bytes]
    name: str
    """Its program, in errors."""
    log: Path
    """Its output."""

    async def answering(self, url: str, *, timeout: float = 120.0) -> None:
        """Wait until ``url`` answers 200; raise with the log's tail if the process exits or times out."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2) as client:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
                try:
                    if (await client.get(url)).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} did not answer on {url}:\n{self.log.read_text()[-3000:]}")
                await asyncio.sleep(0.05)


@asynccontextmanager
async def started(argv: Sequence[str], env: dict[str, str], log: Path, *, cwd: Path = ROOT) -> AsyncIterator[Child]:
    """Start ``argv`` in its own process group (output to ``log``), without waiting for it.

    A caller starts its processes first and prepares the rest while they import, then waits
    with :meth:`Child.answering` where it needs them. Waiting and stopping never block the
    event loop: in smoke mode the benchmarks run at once, and one's server starting must not
    stall another's turns. The process (and anything it started) is stopped with SIGTERM,
    then SIGKILL, on exit.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield Child(proc, Path(argv[0]).name, log)
    finally:
        await asyncio.to_thread(stop_group, proc, grace=40)


def tollgate_command(*args: str) -> list[str]:
    """The ``tollgate`` command of this environment, with ``args``."""
    return [str(Path(sys.executable).parent / "tollgate"), *args]
