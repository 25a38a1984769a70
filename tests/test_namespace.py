"""One namespace for everything Tollgate serves: ``tollgate.tools``, ``tollgate.graph``, ``tollgate.server`` ...

An app with its own ``tools/`` package, ``graph/`` package or ``server.py`` embeds Tollgate: it
imports Tollgate's public API from ``tollgate`` and Tollgate never imports the app's modules in
their place. (tests/test_layout.py checks that no module of ours imports a bare ``tools``.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from tollgate.graph._env import child_environment
from tollgate.graph.settings import Settings

_ROOT = Path(__file__).resolve().parent.parent
_SERVED = ("graph", "nodes", "tools", "policies", "web", "evals")


def test_the_packaged_list_is_every_package_of_the_tree() -> None:
    """pyproject lists the packages one by one (they are mapped from the checkout's root): none is left out."""
    config = tomllib.loads((_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {"tollgate": "."}
    tree = {"tollgate", *("tollgate." + ".".join(init.parent.relative_to(_ROOT).parts)
                          for part in _SERVED for init in (_ROOT / part).rglob("__init__.py"))}
    assert set(config["packages"]) == tree


_TIDES = '''
"""The app's own plug-in, in the app's own ``tools`` package."""
from tollgate.tools import ActionResult, ActionSpec, ArgsModel, ExecContext, SafeText, ToolSpec


class TodayArgs(ArgsModel):
    city: SafeText(80)


async def today(ctx: ExecContext, args: TodayArgs) -> ActionResult:
    return ActionResult(tool="tides", action="today", kind="read", changed=0,
                        summary=f"High tide in {args.city} at 14:05.")


TIDES = ToolSpec(
    name="tides", description="Today's tide times in a coastal city.", capability_phrase="tell you the tides",
    actions=(ActionSpec(name="today", description="The tide times today in a city.", args=TodayArgs, tier="allowlist",
                        effect="read", executor=today, renderer=lambda r: r["summary"],
                        usage_examples=("tide times in Lisbon",)),),
)
'''

_MAIN = '''
import asyncio, json, sys

import tools                                   # the app's package, first on sys.path
from tools.tides import TIDES

from tollgate.graph.app import open_app
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.server import create_app
from tollgate.tools import ActionResult


async def main() -> None:
    create_app(Settings(), tools=[TIDES])     # the HTTP app builds (it opens nothing before its lifespan)
    async with open_app(Settings(), tools=[TIDES]) as app:
        out = await app.runner.send(Context(owner_id="embedder", timezone="Europe/Paris"), "t-embed",
                                    "what are the tide times in Brest?")
    print(json.dumps({"reply": out.reply, "outcome": out.outcome, "apps_tools": tools.__file__,
                      "action_result": ActionResult.__module__,
                      "tollgate_parts": sorted(m for m in sys.modules if m.split(".")[0] in
                                               ("graph", "nodes", "policies", "web", "server", "cli"))}))


asyncio.run(main())
'''


def test_an_app_with_its_own_tools_graph_and_server_modules_embeds_tollgate(settings: Settings,
                                                                             tmp_path: Path) -> None:
    app = tmp_path / "app"
    (app / "tools").mkdir(parents=True)
    (app / "tools" / "__init__.py").write_text('"""The app\'s own tools."""\nActionResult = "the app\'s own"\n')
    (app / "tools" / "tides.py").write_text(textwrap.dedent(_TIDES))
    # Modules of the app that share Tollgate's part names: importing any of them is the bug.
    for name in ("graph", "nodes", "policies", "web"):
        (app / name).mkdir()
        (app / name / "__init__.py").write_text(f'raise ImportError("Tollgate imported the app\'s own {name}")\n')
    for name in ("server", "cli"):
        (app / f"{name}.py").write_text(f'raise ImportError("Tollgate imported the app\'s own {name}.py")\n')
    (app / "main.py").write_text(textwrap.dedent(_MAIN))
    env = child_environment(settings, TOLLGATE_TOOL_ENTRY_POINTS="false")
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, "main.py"], cwd=app, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["apps_tools"] == str(app / "tools" / "__init__.py")
    assert out["action_result"].startswith("tollgate.tools")
    assert out["tollgate_parts"] == []
    assert out["outcome"] == "read" and "High tide in Brest" in out["reply"], out
