"""Where a process's tools come from (tools/loading.py), and plug-in migrations (graph/store/db.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database, ToolMigrationChanged, apply_tool_migrations
from tollgate.tools import ActionResult, ActionSpec, ArgsModel, ExecContext, ToolSpec
from tollgate.tools.loading import ToolLoadError, assemble_registry
from tollgate.tools.registry import Registry


class _NoArgs(ArgsModel):
    pass


async def _run(ctx: ExecContext, args: Any) -> ActionResult:
    return ActionResult(tool="x", action="look", kind="item", summary="Looked.")


def _tool(name: str, migrations: tuple[str, ...] = ()) -> ToolSpec:
    return ToolSpec(name=name, description="A tool.", capability_phrase=f"use {name}", migrations=migrations, actions=(
        ActionSpec(name="look", description="Look.", args=_NoArgs, tier="allowlist", executor=_run,
                   renderer=lambda r: r["summary"], usage_examples=("look",)),))


GADGET = _tool("gadget")
GADGETS = [_tool("gadget_a"), _tool("gadget_b")]


def gadget_factory(settings: Any) -> ToolSpec:
    """A callable source: it gets the settings."""
    assert isinstance(settings, Settings)
    return _tool("made_" + settings.default_timezone.split("/")[0].lower())


def _settings(**values: Any) -> Settings:
    return Settings(approval_secret="x" * 32, tool_entry_points=False, **values)


def test_tools_come_from_the_argument_the_setting_and_callables() -> None:
    registry = assemble_registry(
        _settings(tools=["tests.test_tool_loading:GADGETS", "tests.test_tool_loading:gadget_factory"],
                  default_timezone="Europe/Paris"),
        [GADGET],
    )
    names = [t.name for t in registry.tools]
    assert names[-4:] == ["gadget", "gadget_a", "gadget_b", "made_europe"] and "calendar" in names


def test_built_ins_can_be_switched_off_one_by_one() -> None:
    names = [t.name for t in assemble_registry(_settings(disabled_tools=["reminders", "triggers"])).tools]
    assert "reminders" not in names and "triggers" not in names and "calendar" in names


@pytest.mark.parametrize(
    ("values", "tools", "message"),
    [
        pytest.param({"disabled_tools": ["remindres"]}, [], "names no built-in tool: remindres", id="disabled-typo"),
        pytest.param({"tools": ["tests.test_tool_loading"]}, [], "must look like 'package.module:NAME'", id="bad-reference"),
        pytest.param({"tools": ["tests.no_such_module:TOOLS"]}, [], "cannot import", id="missing-module"),
        pytest.param({"tools": ["tests.test_tool_loading:NOPE"]}, [], "has no 'NOPE'", id="missing-name"),
        pytest.param({"tools": ["tests.test_tool_loading:_settings"]}, [], "building its tools failed", id="bad-callable"),
        pytest.param({}, [GADGET, GADGET], "registered twice: by tools argument #1 and by tools argument #2", id="duplicate"),
        pytest.param({}, [_tool("calendar")], "'calendar' is registered twice: by built-in", id="shadows-a-built-in"),
        pytest.param({}, ["not a tool"], "expected a ToolSpec", id="not-a-tool"),
    ],
)
def test_an_unusable_tool_source_refuses_to_start_and_names_itself(values: dict[str, Any], tools: list[Any],
                                                                    message: str) -> None:
    with pytest.raises(ToolLoadError, match=message.replace("(", r"\(").replace(")", r"\)")):
        assemble_registry(_settings(**values), tools)


async def test_tool_migrations_apply_once_and_an_edited_step_refuses_to_start(db: Database) -> None:
    table = "plugin_" + uuid.uuid4().hex[:8]
    first = _tool(table, (f"CREATE TABLE {table} (id text PRIMARY KEY)",))
    await apply_tool_migrations(db, Registry([first]))
    await apply_tool_migrations(db, Registry([first]))  # applied once: a second start changes nothing
    grown = _tool(table, (*first.migrations, f"ALTER TABLE {table} ADD COLUMN label text"))
    await apply_tool_migrations(db, Registry([grown]))
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM tool_migrations WHERE tool = %s", (table,))
        row = await cur.fetchone()
    assert row is not None and row["n"] == 2
    edited = _tool(table, (f"CREATE TABLE {table} (id bigint PRIMARY KEY)",))
    with pytest.raises(ToolMigrationChanged, match="step 0"):
        await apply_tool_migrations(db, Registry([edited]))
