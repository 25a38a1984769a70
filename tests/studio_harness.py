"""``langgraph dev`` as a test fixture: one real process per test module, over the session database.

From ``.venv-studio`` (``make setup-studio``), on a free loopback port, with analytics, tracing and
version checks off (the environment ``graph._env.child_environment`` builds).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tollgate.graph._env import child_environment, stop_group
from tollgate.graph.settings import Settings
from tests.children import free_port, wait_answering

__all__ = ["LANGGRAPH", "studio_env", "studio_url"]

_ROOT = Path(__file__).resolve().parent.parent
LANGGRAPH = _ROOT / ".venv-studio" / "bin" / "langgraph"
"""The ``langgraph`` command of the Studio environment."""


def studio_env(settings: Settings) -> dict[str, str]:
    """The process environment: the session database, no model endpoint, nothing phoning home.

    Its default timezone is UTC, the zone the demo owners' data is placed in: a run without a
    profile or a claimed zone takes the default, and in another zone "today" differs for an hour
    around midnight (the tests failed from 23:00 to 24:00 UTC in Paris's winter)."""
    return child_environment(settings, TOLLGATE_DEFAULT_TIMEZONE="UTC")


@pytest.fixture(scope="module")
def studio_url(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``langgraph dev`` on a free loopback port, over the session database."""
    if not LANGGRAPH.exists():
        message = f"{LANGGRAPH.relative_to(_ROOT)} is missing: run `make setup-studio`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    workdir = tmp_path_factory.mktemp("studio")  # langgraph dev keeps its own run metadata in ./.langgraph_api
    log = workdir / "langgraph-dev.log"
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(LANGGRAPH), "dev", "--config", str(_ROOT / "langgraph.json"), "--host", "127.0.0.1",
             "--port", str(port), "--no-browser", "--no-reload"],
            cwd=workdir, env=studio_env(settings), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_answering(f"{url}/ok", proc, log, what="langgraph dev")
        yield url
    finally:
        stop_group(proc)


