"""The example plug-in (``examples/bookmarks``, installed by ``make setup``) on every surface, each a real process.

Nothing in Tollgate names the bookmarks tool: each process finds it through the
``tollgate.tools`` entry point. The picker is a loopback OpenAI-compatible server answering from
a script (:mod:`tests.openai_stub`); the rest is real: ``tollgate serve`` over HTTP with its
approval API, a ``tollgate worker`` running a background run, ``tollgate chat`` on a terminal,
and ``langgraph dev`` through the LangGraph SDK.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse

from tollgate.graph._env import child_environment, stop_group
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database
from tests.conftest import all_rows
from tests.openai_stub import StubServer, text, tool_call
from tests.children import free_port, wait_answering
from tests.test_cli import _TOLLGATE, _Terminal, _wait_for
from tollgate.web.auth import issue_token
from tests.harness import what_runs

_ROOT = Path(__file__).resolve().parent.parent
_LANGGRAPH = _ROOT / ".venv-studio" / "bin" / "langgraph"


def _env(settings: Settings, stub: StubServer) -> dict[str, str]:
    picker = [{"name": "stub", "base_url": stub.base_url, "model": "stub-model"}]
    served = settings.model_copy(update={"tool_entry_points": True})
    return child_environment(served, TERM="xterm-256color", TOLLGATE_PICKER_PROVIDERS=json.dumps(picker))


def _offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools", [])}


def _tool_results(request: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content")) for m in request["messages"] if m.get("role") == "tool")


async def _bookmarks(db: Database, owner: str) -> list[tuple[str, str]]:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT title, url FROM example_bookmarks WHERE owner_id = %s ORDER BY title", (owner,))
        return [(r["title"], r["url"]) for r in await cur.fetchall()]


async def _events(client: httpx.AsyncClient, path: str, token: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with aconnect_sse(client, "POST", path, json=body, headers={"Authorization": f"Bearer {token}"}) as source:
        assert source.response.status_code == 200, await source.response.aread()
        return [message.json() async for message in source.aiter_sse()]


def _start(argv: list[str], env: dict[str, str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


async def test_serve_and_worker_serve_the_plugin_with_approval_and_a_background_run(
    settings: Settings, db: Database, owner: str, stub: StubServer, tmp_path: Path
) -> None:
    env = _env(settings, stub)
    port = free_port()
    server = _start([_TOLLGATE, "serve", "--no-worker", "--port", str(port)], env, tmp_path / "serve.log", tmp_path)
    worker = _start([_TOLLGATE, "worker", "--name", "plugin-" + uuid.uuid4().hex[:6]], env, tmp_path / "worker.log", tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        async def up() -> bool:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                return httpx.get(url + "/healthz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        await _wait_for(up, time.monotonic() + 120)
        token = await issue_token(db, owner)
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            # A write of the plug-in waits for approval over HTTP, then runs once.
            stub.push(tool_call("bookmarks__save", {"title": "pasta recipe", "url": "https://example.com/pasta"}))
            asked = await _events(client, "/v1/chat", token, {"message": "bookmark https://example.com/pasta as pasta recipe"})
            assert "bookmarks__save" in _offered(stub.requests[-1])
            approval = [e for e in asked if e["type"] == "approval_required"][-1]["data"]
            assert what_runs(approval["preview"]) == "Save the bookmark 'pasta recipe' (https://example.com/pasta)."
            assert await _bookmarks(db, owner) == []
            done = await _events(client, f"/v1/approvals/{approval['approval_id']}/decision", token, {"type": "approve"})
            assert done[-1]["type"] == "message_complete" and done[-1]["data"]["outcome"] == "executed"
            assert await _bookmarks(db, owner) == [("pasta recipe", "https://example.com/pasta")]

            # A background run, driven by the worker process, reads through the plug-in.
            stub.push(tool_call("bookmarks__list", {}), text("You have one bookmark."))
            created = await client.post("/v1/background-runs", json={"instruction": "list my bookmarks"},
                                        headers={"Authorization": f"Bearer {token}"})
            assert created.status_code == 202, created.text
            run_id = created.json()["run_id"]

            async def finished() -> bool:
                assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
                run = (await client.get(f"/v1/background-runs/{run_id}", headers={"Authorization": f"Bearer {token}"})).json()
                return run["status"] in ("succeeded", "failed", "cancelled")

            await _wait_for(finished, time.monotonic() + 120)
            run = (await client.get(f"/v1/background-runs/{run_id}", headers={"Authorization": f"Bearer {token}"})).json()
            assert run["status"] == "succeeded", run
            assert "pasta recipe" in _tool_results(stub.requests[-1])  # the worker ran the plug-in's read
    finally:
        stop_group(server)
        stop_group(worker)


async def test_chat_on_a_terminal_serves_the_plugin(
    settings: Settings, admin_db: Database, owner: str, stub: StubServer, tmp_path: Path
) -> None:
    async with admin_db.pool.connection() as conn:  # the table exists once any process has started with the plug-in
        await conn.execute("CREATE TABLE IF NOT EXISTS example_bookmarks (id text PRIMARY KEY, owner_id text NOT NULL, "
                           "title text NOT NULL, url text NOT NULL, created_at timestamptz NOT NULL)")
        await conn.execute("INSERT INTO example_bookmarks VALUES (%s, %s, 'knitting', 'https://example.org/knit', now())",
                           ("bm_" + uuid.uuid4().hex[:10], owner))
    stub.push(tool_call("bookmarks__list", {}), text("You saved one link about knitting."))
    term = _Terminal([_TOLLGATE, "chat", "--owner", owner, "--thread", str(uuid.uuid4())], _env(settings, stub), tmp_path)
    try:
        term.expect(f"chatting as {owner}")
        term.expect("you> ")
        term.type("show my bookmarks")
        screen = term.expect("you> ")
        assert "You saved one link about knitting." in screen
        assert "bookmarks__list" in _offered(stub.requests[0])
        assert "knitting" in _tool_results(stub.requests[-1])
        term.type("/quit")
        assert term.wait() == 0
    finally:
        term.close()


async def test_langgraph_dev_serves_the_plugin_through_the_sdk(
    settings: Settings, db: Database, owner: str, stub: StubServer, tmp_path: Path
) -> None:
    from langgraph_sdk import get_client

    if not _LANGGRAPH.exists() and os.environ.get("CI") != "true":
        pytest.skip("run `make setup-studio`")
    stub.push(tool_call("bookmarks__list", {}), text("No bookmarks yet."))
    port = free_port()
    log = tmp_path / "langgraph-dev.log"
    proc = _start([str(_LANGGRAPH), "dev", "--config", str(_ROOT / "langgraph.json"), "--host", "127.0.0.1",
                   "--port", str(port), "--no-browser", "--no-reload"], _env(settings, stub), log, tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_answering(f"{url}/ok", proc, log, what="langgraph dev")
        token = await issue_token(db, owner, label="studio test")
        client = get_client(url=url, headers={"Authorization": f"Bearer {token}"})
        try:
            thread = await client.threads.create()
            result = await client.runs.wait(thread["thread_id"], "tollgate", context={"owner_id": owner},
                                            input={"messages": [{"role": "user", "content": "show my bookmarks"}]})
        finally:
            await client.aclose()
        assert isinstance(result, dict) and result.get("reply") == "No bookmarks yet.", result
        assert "bookmarks__list" in _offered(stub.requests[0])
    finally:
        stop_group(proc)
