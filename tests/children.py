"""Child processes of the tests (a server, ``langgraph dev``, a turn on owners' own servers): a free
port, waiting until one answers, and running :mod:`tests.procs.connector`."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

if TYPE_CHECKING:
    from tollgate.graph.settings import Settings

__all__ = ["free_port", "run_connector_step", "wait_answering"]

_ROOT = Path(__file__).resolve().parent.parent


_handed_out: set[int] = set()
"""Ports this process handed out: two children started side by side never get the same one."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1, below the kernel's range of ephemeral ports.

    The port is bound later, often by a child process; one the kernel handed out (port 0) lies in
    the ephemeral range, where any outgoing connection made meanwhile can take it (seen: the
    SMTP test server's third port, "address already in use"). Below that range only listeners compete.
    """
    for _ in range(200):
        port = random.randint(20000, 32767)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port between 20000 and 32767")


def serve_tollgate(env: dict[str, str], cwd: Path, port: int) -> subprocess.Popen[str]:
    """``tollgate serve --no-worker`` on ``port`` in its own session, once it answers; its output
    goes to ``cwd/serve.log``."""
    tollgate = str(Path(sys.executable).with_name("tollgate"))
    with (cwd / "serve.log").open("w") as log:
        proc = subprocess.Popen([tollgate, "serve", "--no-worker", "--port", str(port)], env=env, cwd=cwd,
                                stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    wait_answering(f"http://127.0.0.1:{port}/healthz", proc, cwd / "serve.log", what="tollgate serve")
    return proc


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
    from tollgate.graph._env import child_environment

    env = child_environment(cfg, TOLLGATE_THREAD_LEASE_SECONDS="2", TOLLGATE_THREAD_WAIT_SECONDS="30",
                            TOLLGATE_CALENDAR_BACKEND_OWNERS=json.dumps(cfg.calendar_backend_owners),
                            TOLLGATE_MAIL_BACKEND_OWNERS=json.dumps(cfg.mail_backend_owners),
                            TOLLGATE_EGRESS_ALLOW_NETWORKS=json.dumps(cfg.egress_allow_networks),
                            TOLLGATE_CONNECTOR_PLAINTEXT_HOSTS=json.dumps(cfg.connector_plaintext_hosts))
    return subprocess.run([sys.executable, "-m", "tests.procs.connector", *args], cwd=_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
