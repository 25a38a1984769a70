"""Layout rules that keep the design honest: the packages' imports run one way, policies are pure,
identity never comes from args.

The arrows: ``policies`` ← ``tools`` ← ``graph``'s parts ← ``nodes`` ← ``graph``'s wiring
(``graph/turn.py``, ``graph/app.py``) ← ``web``, ``server.py``, ``cli.py``. Each package has a
test of what it may not import (every import, at module level or inside a function).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

import pytest

_ROOT = Path(__file__).resolve().parent.parent
_FORBIDDEN = ("graph", "nodes", "server", "tools", "cli")


@pytest.mark.parametrize("path", sorted((_ROOT / "policies").glob("*.py")), ids=lambda p: p.name)
def test_policies_import_nothing_from_the_runtime(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {_ours(alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(_ours(node.module).split(".")[0])
    assert not imported & set(_FORBIDDEN), f"{path.name} imports {sorted(imported & set(_FORBIDDEN))}"


_OURS: Final = frozenset({"graph", "nodes", "tools", "policies", "web", "server", "cli", "evals", "bench", "tests",
                          "examples"})
_WIRING: Final = frozenset({"graph/turn.py", "graph/app.py"})
"""The graph modules that assemble the turn from its nodes (the only ones that import ``nodes``)."""


def _ours(name: str) -> str:
    """``name`` without the ``tollgate.`` namespace every part is served under."""
    return name.removeprefix("tollgate.")


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports, as written (``from tollgate import tools`` is ``tollgate.tools``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "tollgate" and not node.level:
            out |= {f"tollgate.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, as dotted names within the namespace (``graph.turn``)."""
    return {_ours(name) for name in _imported(path)}


def _files(package: str) -> list[Path]:
    return sorted((_ROOT / package).rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(_ROOT).as_posix()


_SURFACES: Final = ("web", "server", "cli", "evals", "bench", "tests", "examples")


def _violations(relative: str, modules: set[str]) -> set[str]:
    """The imports of the module at ``relative`` that its package's rule forbids."""
    package = relative.split("/")[0]
    top = {name: name.split(".")[0] for name in modules if name.split(".")[0] in _OURS}
    if package == "tools":  # tools know the pure policies and each other, nothing of the runtime
        return {name for name, first in top.items() if first not in ("policies", "tools")}
    if package == "nodes":  # nodes use graph's parts, never its wiring or a surface
        return {name for name, first in top.items() if first in _SURFACES
                or name in ("graph.turn", "graph.runner", "graph.app") or name.startswith("graph.studio")}
    if package == "graph":  # no surface; nodes only where the turn is wired
        return {name for name, first in top.items()
                if first in _SURFACES or (first == "nodes" and relative not in _WIRING)}
    if package == "web":
        return {name for name, first in top.items() if first in ("cli", "evals", "bench", "tests", "examples")}
    return set()


@pytest.mark.parametrize("path", [*_files("tools"), *_files("nodes"), *_files("graph"), *_files("web")], ids=_relative)
def test_each_package_imports_only_what_its_layer_may(path: Path) -> None:
    wrong = _violations(_relative(path), _imports(path))
    assert not wrong, f"{_relative(path)} imports {sorted(wrong)}"


def test_the_layering_rules_catch_the_old_arrows() -> None:
    """The imports this layout once had (the runner on the approval node, Studio on the web
    authenticator, tools on the runtime's perimeter and background runs) are each refused."""
    assert _violations("graph/runner.py", {"nodes.approval", "nodes.propose"}) == {"nodes.approval", "nodes.propose"}
    assert _violations("graph/studio/auth.py", {"web.identity"}) == {"web.identity"}
    assert _violations("tools/web.py", {"graph.perimeter.config"}) == {"graph.perimeter.config"}
    assert _violations("tools/builtin.py", {"graph.background.offer"}) == {"graph.background.offer"}
    assert _violations("graph/turn.py", {"nodes.approval"}) == set()  # the wiring


_SERVED: Final = ("graph", "nodes", "tools", "policies", "web", "evals", "server", "cli")
"""The parts served under ``tollgate.``: the checkout's root (pyproject's ``package-dir``)."""


@pytest.mark.parametrize("path", [*(p for part in _SERVED for p in _files(part)), _ROOT / "server.py",
                                  _ROOT / "cli.py", *_files("examples"), *_files("bench"), *_files("tests")],
                         ids=_relative)
def test_every_module_imports_tollgate_through_its_namespace(path: Path) -> None:
    """An app with its own ``tools/`` or ``server.py`` embeds Tollgate: no module of ours names a bare
    ``tools`` or ``graph``, which would resolve to the app's."""
    bare = {name for name in _imported(path) if name.split(".")[0] in _SERVED}
    assert not bare, f"{_relative(path)} imports {sorted(bare)} outside the tollgate namespace"


def test_strict_msgpack_is_on_before_langgraph_loads() -> None:
    import os

    import tollgate.graph  # noqa: F401

    assert os.environ["LANGGRAPH_STRICT_MSGPACK"] == "true"
    from langgraph.checkpoint.serde import _msgpack

    assert _msgpack.STRICT_MSGPACK_ENABLED is True


def test_the_server_worker_and_cli_never_load_the_openai_sdk() -> None:
    """Model calls are Tollgate's own Chat Completions client (graph.models.chat_completions): the
    server, a worker and the CLI never import ``openai`` or ``langchain_openai``, with or without a
    provider configured (what that saves is measured in bench/README.md)."""
    import subprocess
    import sys

    script = (
        "import sys, tollgate.cli, tollgate.server, tollgate.graph.app, tollgate.graph.background.worker\n"
        "from tollgate.graph.models.llm import build_model\n"
        "from tollgate.graph.settings import Settings\n"
        "assert build_model(Settings(), 'picker', fallback=None) is None\n"
        "print(sorted(m for m in ('openai', 'langchain_openai') if m in sys.modules))\n"
        "assert build_model(Settings(openai_base_url='http://127.0.0.1:9/v1', picker_model='m'), 'picker', fallback=None)\n"
        "print(sorted(m for m in ('openai', 'langchain_openai') if m in sys.modules))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("OPENAI_", "TOLLGATE_"))}
    out = subprocess.run([sys.executable, "-c", script], cwd=_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["[]", "[]"]
