"""Process-wide safety switches that must be set before langgraph is imported.

Imported first by :mod:`graph`; the Makefile, CI and the Studio config set the same values.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tollgate.graph.settings import Settings

__all__ = ["child_environment", "stop_group"]

# Checkpoint deserialization restricted to LangGraph's safe types (no arbitrary imports).
os.environ["LANGGRAPH_STRICT_MSGPACK"] = "true"
# Tollgate never phones home: no analytics, tracing or version checks from langgraph tooling.
os.environ.setdefault("LANGGRAPH_CLI_NO_ANALYTICS", "1")
os.environ.setdefault("LANGSMITH_TRACING", "false")
os.environ.setdefault("LANGCHAIN_TRACING_V2", "false")
os.environ.setdefault("LANGGRAPH_NO_VERSION_CHECK", "true")


_INHERITED_OFF = ("TOLLGATE_", "OPENAI_", "LANGSMITH_", "LANGCHAIN_", "LANGGRAPH_")


def child_environment(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a Tollgate process started from this one (a server, a worker, a CLI).

    This process's environment without anything that could point the child elsewhere (Tollgate,
    model-provider, LangChain and LangGraph variables), then ``settings``' database, approval
    secret, data directory, timezone and whether installed plug-ins are served, the switches above, and ``extra``.
    """
    if settings.approval_secret is None:
        raise ValueError("a child process needs the approval secret of the settings")
    env = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED_OFF) and k != "DATABASE_URL"}
    return env | {
        "DATABASE_URL": str(settings.database_url),
        **({"TOLLGATE_MIGRATION_DATABASE_URL": settings.migration_database_url} if settings.migration_database_url else {}),
        "TOLLGATE_APPROVAL_SECRET": settings.approval_secret.get_secret_value(),
        "TOLLGATE_DATA_DIR": str(settings.data_dir),
        "TOLLGATE_DEFAULT_TIMEZONE": settings.default_timezone,
        "TOLLGATE_TOOL_ENTRY_POINTS": "true" if settings.tool_entry_points else "false",
        "LANGGRAPH_STRICT_MSGPACK": "true",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
    } | extra


def stop_group(proc: subprocess.Popen[bytes], *, grace: float = 30.0) -> None:
    """Stop a child started in its own process group, and all it started: SIGTERM, then SIGKILL after ``grace`` s."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
