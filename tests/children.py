"""Child processes of the tests (a server, ``langgraph dev``, a turn on owners' own servers): a free
port, waiting until one answers, and running :mod:`tests.procs.connector`."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

if TYPE_CHECKING:
    from graph.settings import Settings

__all__ = ["free_port", "run_connector_step", "wait_answering"]

_ROOT = Path(__file__).resolve().parent.parent


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


def run_connector_step(cfg: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """Run one step of :mod:`tests.procs.connector` in its own process, with ``cfg``'s database,
    backends and reach, and a 2 s thread lease (a killed step frees its thread quickly)."""
    from graph._env import child_environment

    env = child_environment(cfg, TOLLGATE_THREAD_LEASE_SECONDS="2", TOLLGATE_THREAD_WAIT_SECONDS="30",
                            TOLLGATE_CALENDAR_BACKEND_OWNERS=json.dumps(cfg.calendar_backend_owners),
                            TOLLGATE_MAIL_BACKEND_OWNERS=json.dumps(cfg.mail_backend_owners),
                            TOLLGATE_EGRESS_ALLOW_NETWORKS=json.dumps(cfg.egress_allow_networks),
                            TOLLGATE_CONNECTOR_PLAINTEXT_HOSTS=json.dumps(cfg.connector_plaintext_hosts))
    return subprocess.run([sys.executable, "-m", "tests.procs.connector", *args], cwd=_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
