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
