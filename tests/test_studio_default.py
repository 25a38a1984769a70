"""``make studio`` as the README runs it, in the default environment: no TOLLGATE_ variable, no DATABASE_URL.

It runs in a directory of its own that links to the repository's Makefile, config and
environments, so ``./var`` (the approval key it generates, the embedded PostgreSQL it starts
inside ``langgraph dev``, which refuses blocking calls on its event loop) is the test's own and
the developer's is left alone.
"""

from __future__ import annotations

import os
import secrets
import sys
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph_sdk import get_client
from psycopg.rows import dict_row

from tollgate.graph._env import stop_group
from tollgate.graph.services import utc_now
from tollgate.graph.store.embedded import status, stop
from tests.children import free_port, wait_answering
from tests.test_studio import _LANGGRAPH, _ROOT
from tollgate.tools.demo import seed_demo
from tollgate.web.auth import hash_token

_OFF = ("TOLLGATE_", "OPENAI_", "LANGSMITH_", "LANGCHAIN_", "LANGGRAPH_")


@pytest.fixture(scope="module")
def default_studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """``make studio PORT=...`` with nothing configured; (url, its ./var, log)."""
    if not _LANGGRAPH.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("`make setup-studio` did not run")
        pytest.skip("run `make setup-studio` first")
    work = tmp_path_factory.mktemp("studio-default")
    for name in ("Makefile", "langgraph.json", "langgraph-open.json", "pyproject.toml", "requirements.lock", "requirements-studio.lock",
                 "examples", ".venv", ".venv-studio"):
        (work / name).symlink_to(_ROOT / name)
    data_dir, log = work / "var", work / "make-studio.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OFF) and k not in ("DATABASE_URL", "MAKEFLAGS")}
    port = free_port()
    with log.open("wb") as out:
        # -o: the environments are the repository's, set up already; the test never installs anything.
        proc = subprocess.Popen(["make", "-s", "-C", str(work), "-o", ".venv/.installed", "-o", ".venv-studio/.installed",
                                 "studio", f"PORT={port}"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_answering(f"{url}/ok", proc, log, what="make studio", timeout=180)
        yield url, data_dir, log
    finally:
        stop_group(proc)
        stop(data_dir)


def _user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


async def test_make_studio_runs_and_resumes_a_write_with_no_secret_set(default_studio: tuple[str, Path, Path]) -> None:
    url, data_dir, log = default_studio
    database = status(data_dir).url
    assert database is not None  # the embedded server, started by langgraph dev itself
    owner = "studio-default"
    token = f"tg_{secrets.token_urlsafe(32)}"
    async with await psycopg.AsyncConnection.connect(database, autocommit=True, row_factory=dict_row) as conn:
        async with conn.transaction():
            await seed_demo(conn, owner, utc_now(), "UTC")
            await conn.execute("INSERT INTO api_tokens (token_hash, owner_id) VALUES (%s, %s)", (hash_token(token), owner))

    client = get_client(url=url, headers={"Authorization": f"Bearer {token}"})
    context = {"owner_id": owner, "timezone": "UTC"}
    tid = (await client.threads.create())["thread_id"]
    for text in ("what's on my calendar today?", "cancel the 2nd one"):
        async for part in client.runs.stream(tid, "tollgate", input=_user(text), context=context, stream_mode="values"):
            assert part.event != "error", part.data
    [interrupt] = (await client.threads.get_state(tid))["interrupts"]
    token = interrupt["value"]["approval"]["token"]  # minted with the development key the run generated
    assert (data_dir / "approval.key").exists()
    resume = {"token": token, "decisions": [{"type": "approve"}]}
    async for part in client.runs.stream(tid, "tollgate", command={"resume": resume}, context=context,
                                         stream_mode="values"):
        assert part.event != "error", part.data
    state = await client.threads.get_state(tid)
    assert state["interrupts"] == []
    assert "Cancelled" in state["values"]["messages"][-1]["content"]
    await client.aclose()

    printed = log.read_text()
    assert "Blocking" not in printed, printed[-3000:]
    assert "changes detected" not in printed  # no file watcher on the database files under the data directory


def test_make_studio_open_serves_without_credentials_on_loopback_and_says_so(
    default_studio: tuple[str, Path, Path],
) -> None:
    """The unauthenticated mode: bound to 127.0.0.1 by the Makefile, and loud about it as it starts."""
    root = Path(__file__).resolve().parent.parent
    dry = subprocess.run(["make", "-n", "-C", str(root), "studio-open", "PORT=2099"], capture_output=True, text=True,
                         check=True)
    assert "--config langgraph-open.json --host 127.0.0.1" in dry.stdout
    assert "disable_studio_auth" not in (root / "langgraph-open.json").read_text()
    assert '"auth"' not in (root / "langgraph-open.json").read_text()
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OFF) and k not in ("DATABASE_URL", "MAKEFLAGS")}
    env["TOLLGATE_STUDIO_OPEN"] = "true"
    shown = subprocess.run([sys.executable, "-c", "import tollgate.graph.studio.platform"], env=env, capture_output=True, text=True,
                           timeout=120, cwd=default_studio[1].parent)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "WITHOUT authentication" in shown.stderr
