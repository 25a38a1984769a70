"""Child processes of the tests (a server, ``langgraph dev``): a free port, and waiting until one answers."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

__all__ = ["free_port", "wait_answering"]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_answering(url: str, proc: subprocess.Popen[Any], log: Path, *, what: str, timeout: float = 120) -> None:
    """Return once ``url`` answers 200; fail the test with the log's tail if ``proc`` exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"{what} did not answer on {url}:\n{log.read_text()[-4000:]}")
