"""Layout rules that keep the design honest: policies are pure, identity never comes from args."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parent.parent
_FORBIDDEN = ("graph", "nodes", "server", "tools", "cli")


@pytest.mark.parametrize("path", sorted((_ROOT / "policies").glob("*.py")), ids=lambda p: p.name)
def test_policies_import_nothing_from_the_runtime(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & set(_FORBIDDEN), f"{path.name} imports {sorted(imported & set(_FORBIDDEN))}"


def test_strict_msgpack_is_on_before_langgraph_loads() -> None:
    import os

    import graph  # noqa: F401

    assert os.environ["LANGGRAPH_STRICT_MSGPACK"] == "true"
    from langgraph.checkpoint.serde import _msgpack

    assert _msgpack.STRICT_MSGPACK_ENABLED is True


def test_a_process_without_a_model_provider_never_loads_the_openai_client() -> None:
    """The server, a worker and the CLI start without ``openai`` (about 0.8 s of their start) until a
    provider is configured; then ``build_model`` loads it."""
    import subprocess
    import sys

    script = (
        "import sys, cli, server, graph.app, graph.background.worker\n"
        "from graph.models.llm import build_model\n"
        "from graph.settings import Settings\n"
        "assert build_model(Settings(), 'picker', fallback=None) is None\n"
        "print(sorted(m for m in ('openai', 'langchain_openai') if m in sys.modules))\n"
        "build_model(Settings(openai_base_url='http://127.0.0.1:9/v1', picker_model='m'), 'picker', fallback=None)\n"
        "print(sorted(m for m in ('openai', 'langchain_openai') if m in sys.modules))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("OPENAI_", "TOLLGATE_"))}
    out = subprocess.run([sys.executable, "-c", script], cwd=_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["[]", "['langchain_openai', 'openai']"]
