"""What an operator does from the command line: tokens, the embedded database, ports, start-up errors.

Each command runs as a person runs it (the installed ``tollgate`` entry point in a subprocess,
in a temporary directory). Tests of the embedded database give it a data directory of its own
and no ``DATABASE_URL``, as ``make run`` on a fresh clone has.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tollgate.graph._env import child_environment
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database
from tollgate.graph.store.embedded import status, stop
from tests.children import free_port, serve_tollgate as _serve
from tollgate.web.auth import owner_of_token

_TOLLGATE = str(Path(sys.executable).with_name("tollgate"))


def _env(settings: Settings, **extra: str) -> dict[str, str]:
    return child_environment(settings, **extra)


def _embedded_env(settings: Settings, data_dir: Path) -> dict[str, str]:
    """The environment of a fresh clone: no DATABASE_URL, the embedded server under ``data_dir``."""
    env = child_environment(settings, TOLLGATE_DATA_DIR=str(data_dir))
    del env["DATABASE_URL"]
    return env


def _tollgate(*argv: str, env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_TOLLGATE, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data directory of the test's own; its embedded server is stopped afterwards, whatever happened."""
    path = tmp_path / "var"
    try:
        yield path
    finally:
        stop(path)


# --- tokens -----------------------------------------------------------------------------------


async def test_token_create_list_and_revoke(settings: Settings, db: Database, owner: str, tmp_path: Path) -> None:
    env = _env(settings)
    made = _tollgate("token", "create", "--owner", owner, "--label", "laptop", env=env, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("tg_")
    assert await owner_of_token(db, token) == owner

    listed = _tollgate("token", "list", "--owner", owner, env=env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    [row] = [line.split() for line in listed.stdout.splitlines()[1:] if line.strip()]
    token_id = row[0]
    assert row[1:3] == [owner, "laptop"]
    assert token not in listed.stdout  # only its id, the start of its hash

    revoked = _tollgate("token", "revoke", token_id, env=env, cwd=tmp_path)
    assert revoked.returncode == 0, revoked.stderr
    assert f"revoked {token_id} ({owner}, laptop)" in revoked.stdout
    assert await owner_of_token(db, token) is None
    assert "no tokens" in _tollgate("token", "list", "--owner", owner, env=env, cwd=tmp_path).stdout
    assert owner in _tollgate("token", "list", "--owner", owner, "--revoked", env=env, cwd=tmp_path).stdout

    again = _tollgate("token", "revoke", token_id, env=env, cwd=tmp_path)
    assert again.returncode == 2
    assert "no live token" in again.stderr
    short = _tollgate("token", "revoke", token_id[:3], env=env, cwd=tmp_path)
    assert short.returncode == 2
    assert "6 or more hex characters" in short.stderr


def test_a_token_for_an_invalid_owner_is_refused(settings: Settings, tmp_path: Path) -> None:
    done = _tollgate("token", "create", "--owner", "bad owner!", env=_env(settings), cwd=tmp_path)
    assert done.returncode == 2
    assert "not created" in done.stderr
    assert "tg_" not in done.stdout


# --- ports ------------------------------------------------------------------------------------


def test_serve_on_a_busy_port_says_so_before_printing_a_link(settings: Settings, tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = _tollgate("serve", "--demo", "--port", str(port), env=_env(settings), cwd=tmp_path)
    assert done.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in done.stderr
    assert "--port" in done.stderr
    assert "tg_" not in done.stdout + done.stderr  # no token printed for a server that never starts
    assert "Traceback" not in done.stdout + done.stderr


def test_make_run_takes_a_port(tmp_path: Path) -> None:
    """`make run PORT=...` and `make studio PORT=...` pass the port on (make -n prints the commands)."""
    root = Path(__file__).resolve().parent.parent
    run = subprocess.run(["make", "-n", "-C", str(root), "run", "PORT=8765"], capture_output=True, text=True, check=True)
    assert "tollgate serve --demo --port 8765" in run.stdout
    studio = subprocess.run(["make", "-n", "-C", str(root), "studio", "PORT=2099"], capture_output=True, text=True,
                            check=True)
    assert "langgraph dev --no-browser --no-reload --port 2099" in studio.stdout


# --- start-up errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        pytest.param({"TOLLGATE_PICKER_PROVIDERS": '[{"name": '}, "TOLLGATE_PICKER_PROVIDERS is not valid JSON", id="json"),
        pytest.param({"TOLLGATE_PICKER_PROVIDERS": '[{"name": "x", "base_url": "ftp://models.example", "model": "m"}]'},
                     "must be an http(s) URL", id="scheme"),
        pytest.param({"TOLLGATE_PICKER_MODEL": "gpt-4.1-mini"}, "set OPENAI_API_KEY", id="api-key"),
        pytest.param({"TOLLGATE_STEP_BUDGET": "1000"}, "TOLLGATE_STEP_BUDGET: Input should be less than", id="range"),
        pytest.param({"DATABASE_URL": "not a url"}, "DATABASE_URL is not a PostgreSQL URL", id="database-url"),
    ],
)
def test_a_configuration_error_is_one_sentence_naming_the_variable(
    settings: Settings, tmp_path: Path, variables: dict[str, str], expected: str
) -> None:
    env = _env(settings) | variables
    done = _tollgate("serve", "--port", str(free_port()), env=env, cwd=tmp_path)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip() and "embedded PostgreSQL stopped" not in line]
    assert len(lines) == 1, done.stderr
    assert expected in lines[0]
    assert "Traceback" not in done.stdout + done.stderr

    debug = _tollgate("--debug", "serve", "--port", str(free_port()), env=env, cwd=tmp_path)
    assert debug.returncode != 0
    assert "Traceback" in debug.stderr or "Error" in debug.stderr


def _silent_server() -> tuple[socket.socket, threading.Event]:
    """A TCP server that accepts and never answers: a database host that hangs."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen()
    done = threading.Event()

    def hold() -> None:
        held = []
        server.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                break
        for conn in held:
            conn.close()

    threading.Thread(target=hold, daemon=True).start()
    return server, done


def test_an_unreachable_database_fails_within_seconds_naming_host_and_port(settings: Settings, tmp_path: Path) -> None:
    server, done = _silent_server()
    port = server.getsockname()[1]
    try:
        started = time.monotonic()
        failed = _tollgate("serve", "--port", str(free_port()), cwd=tmp_path,
                           env=_env(settings) | {"DATABASE_URL": f"postgresql://tollgate:pw@127.0.0.1:{port}/tollgate"})
        waited = time.monotonic() - started
    finally:
        done.set()
        server.close()
    assert failed.returncode == 2
    assert f"cannot reach PostgreSQL at 127.0.0.1:{port} (DATABASE_URL)" in failed.stderr
    assert "pw" not in failed.stderr.replace("PostgreSQL", "")
    assert waited < 20, f"took {waited:.1f} s"  # the pool used to wait 30 s, then print a traceback

    refused = _tollgate("migrate", cwd=tmp_path, env=_env(settings) | {"DATABASE_URL": f"postgresql://u@127.0.0.1:{free_port()}/x"})
    assert refused.returncode == 2
    assert "Connection refused" in refused.stderr
    assert "Traceback" not in refused.stderr


# --- the embedded database --------------------------------------------------------------------


def test_db_status_stop_and_reset(settings: Settings, data_dir: Path, tmp_path: Path) -> None:
    env = _embedded_env(settings, data_dir)
    fresh = _tollgate("db", "status", env=env, cwd=tmp_path)
    assert fresh.returncode == 0, fresh.stderr
    assert "not created yet" in fresh.stdout
    assert "running: no" in fresh.stdout

    port = free_port()
    server = _serve(env, tmp_path, port)
    try:
        running = _tollgate("db", "status", env=env, cwd=tmp_path)
        assert "running: yes" in running.stdout, running.stdout
        assert str(data_dir.resolve() / "pg") in running.stdout
        stopped = _tollgate("db", "stop", env=env, cwd=tmp_path)
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.strip() == "stopped"
        assert not status(data_dir).running
        assert "running: no" in _tollgate("db", "status", env=env, cwd=tmp_path).stdout
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)

    assert _tollgate("db", "reset", env=env, cwd=tmp_path, timeout=30).returncode == 1  # no confirmation: nothing deleted
    assert status(data_dir).initialized
    reset = _tollgate("db", "reset", "--yes", env=env, cwd=tmp_path)
    assert reset.returncode == 0, reset.stderr
    assert not status(data_dir).initialized
    assert not (data_dir / "pg").exists()

    elsewhere = _tollgate("db", "stop", env=_env(settings), cwd=tmp_path)
    assert elsewhere.returncode == 2
    assert "DATABASE_URL is set" in elsewhere.stderr


def _leave_a_stale_holder(data_dir: Path) -> None:
    """A process that started the embedded server and was killed: its claim on the server stays behind."""
    script = ("import os, sys; from graph.store.db import embedded_url; embedded_url(__import__('pathlib').Path(sys.argv[1]));"
              " os.kill(os.getpid(), 9)")
    subprocess.run([sys.executable, "-c", script, str(data_dir)], check=False, timeout=120)
    assert status(data_dir).running


def test_ctrl_c_on_serve_stops_the_embedded_database(settings: Settings, data_dir: Path, tmp_path: Path) -> None:
    _leave_a_stale_holder(data_dir)
    port = free_port()
    server = _serve(_embedded_env(settings, data_dir), tmp_path, port)
    os.killpg(server.pid, signal.SIGINT)
    server.wait(timeout=60)
    out = (tmp_path / "serve.log").read_text()
    assert server.returncode in (0, 130), out
    assert not status(data_dir).running, out
    assert "embedded PostgreSQL stopped" in out


def test_ctrl_c_on_serve_leaves_the_database_to_a_process_still_using_it(
    settings: Settings, data_dir: Path, tmp_path: Path
) -> None:
    # Another Tollgate process on the same database (a Studio, a terminal chat): started, connected, waiting.
    script = ("import sys, pathlib, psycopg; from graph.store.db import embedded_url;"
              " conn = psycopg.connect(embedded_url(pathlib.Path(sys.argv[1]))); print('ready', flush=True);"
              " sys.stdin.readline(); print(conn.execute('SELECT 1').fetchone()[0], flush=True)")
    other = subprocess.Popen([sys.executable, "-c", script, str(data_dir)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdin is not None
        assert other.stdout.readline().strip() == "ready"
        server = _serve(_embedded_env(settings, data_dir), tmp_path, free_port())
        os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=60)
        assert status(data_dir).running
        assert "embedded PostgreSQL stopped" not in (tmp_path / "serve.log").read_text()
        out, _ = other.communicate("go\n", timeout=60)  # its connection survived the server's exit
        assert out.strip() == "1"
    finally:
        other.kill()
        other.wait()
