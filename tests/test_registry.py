"""The build fails if an enabled action is unclassified, undocumented or leaks identity into schemas."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, get_args

import pytest

from tollgate.graph.settings import Settings
from tollgate.policies.arguments import ArgsModel, IdRef
from tollgate.policies.tiers import Tier, classify_tier, looks_destructive
from tollgate.graph.background.offer import BACKGROUND
from tollgate.tools.builtin import builtin_tools, default_registry
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, Registry, ToolSpec

_FORBIDDEN_PROPERTY = re.compile(r"owner|tenant|account", re.I)
# An argument that names a stored item must be declared as an id field, or id validation
# would never check it against the thread's recent list.
_ID_LIKE = re.compile(r"(^|_)ids?$")


def registry_problems(registry: Registry, *, min_examples: int = 1) -> list[str]:
    """Every reason the registry would be unsafe or undocumented, one line each."""
    problems: list[str] = []
    tier_map = registry.tier_map()
    list_kinds = {t.name for t in registry.tools if any(a.name == "list" for a in t.actions)}
    for tool in registry.tools:
        if not tool.capability_phrase.strip():
            problems.append(f"{tool.name}: no capability phrase")
        if not tool.description.strip():
            problems.append(f"{tool.name}: no description")
    for tool, action in registry.actions():
        where = f"{tool.name}.{action.name}"
        if action.tier not in get_args(Tier):
            problems.append(f"{where}: no tier")
        if classify_tier(tool.name, action.name, tier_map, action.effect).reason in ("unclassified", "hard_delete"):
            problems.append(f"{where}: unclassified or hard delete")
        examples = [e for e in action.usage_examples if e.strip()]
        if len(examples) < min_examples:
            problems.append(f"{where}: {len(examples)} usage example(s), need {min_examples}")
        if not action.description.strip() or "\n" in action.description:
            problems.append(f"{where}: needs a one-line description")
        if action.tier == "confirmation" and action.preview is None:
            problems.append(f"{where}: confirmation without preview")
        if action.writes and action.tier == "allowlist" and not action.idempotent:
            problems.append(f"{where}: an approval-free write must be idempotent")
        if action.writes and action.tier not in ("allowlist", "confirmation"):
            problems.append(f"{where}: a write with tier {action.tier!r} can never run")
        for name in action.args.model_fields:
            if _ID_LIKE.search(name) and name not in action.id_fields:
                problems.append(f"{where}: id field {name!r} not declared")
            if _FORBIDDEN_PROPERTY.search(name):
                problems.append(f"{where}: identity field {name!r}")
        for name, kind in action.id_fields.items():
            if name not in action.args.model_fields:
                problems.append(f"{where}: declared id field {name!r} is not an argument")
            if kind not in list_kinds:
                problems.append(f"{where}: id kind {kind!r} has no list action")
    return problems


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_every_enabled_action_is_classified_and_documented() -> None:
    assert registry_problems(default_registry(), min_examples=3) == []


def test_the_checker_catches_a_careless_action() -> None:
    class LeakyArgs(ArgsModel):
        event_id: IdRef
        account: str = ""

    async def run(ctx: ExecContext, args: Any) -> ActionResult:
        raise AssertionError("never runs")

    careless = ActionSpec(
        name="move", description="", args=LeakyArgs, tier="allowlist", executor=run,
        renderer=lambda r: r["summary"], usage_examples=(), effect="write", idempotent=False,
    )
    tool = ToolSpec(name="gadget", description="A gadget.", capability_phrase="", actions=(careless,))
    assert registry_problems(Registry([tool])) == [
        "gadget: no capability phrase",
        "gadget.move: 0 usage example(s), need 1",
        "gadget.move: needs a one-line description",
        "gadget.move: an approval-free write must be idempotent",
        "gadget.move: id field 'event_id' not declared",
        "gadget.move: identity field 'account'",
    ]


def test_tier_map_covers_every_action() -> None:
    registry = default_registry()
    pairs = {(t.name, a.name) for t, a in registry.actions()}
    assert set(registry.tier_map()) == pairs
    assert len(pairs) == sum(len(t.actions) for t in builtin_tools()) == 25  # the background offer is the runtime's
    assert not any(looks_destructive(action) for _, action in pairs)
    assert {a.effect for _, a in registry.actions()} == {"read", "write"}
    # Reads run at once; every write needs approval except the reversible, idempotent mark_read and
    # the soft cancel of a trigger rule.
    approval_free_writes = {(t.name, a.name) for t, a in registry.actions() if a.writes and a.tier == "allowlist"}
    assert approval_free_writes == {("mail", "mark_read"), ("triggers", "cancel")}
    # The only operator-tier action is the server-built background offer (the runtime's, registered
    # beside the built-ins by graph.app): never offered to a model.
    assert not any(a.tier == "mustlist" for _, a in registry.actions())
    served = Registry((*registry.tools, BACKGROUND))
    assert {(t.name, a.name) for t, a in served.actions() if a.tier == "mustlist"} == {
        ("background", "continue_in_background")
    }
    assert len(served.function_schemas()) == 25


def test_function_schemas_are_closed_and_carry_no_identity() -> None:
    registry = default_registry()
    schemas = registry.function_schemas()
    assert len(schemas) == 25  # every action but the server-only background offer
    for schema in schemas:
        params = schema["function"]["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        for node in _walk(params):
            if node.get("type") == "object":
                assert node.get("additionalProperties") is False, schema["function"]["name"]
            for prop in node.get("properties", {}):
                assert not _FORBIDDEN_PROPERTY.search(prop), (schema["function"]["name"], prop)
    # Policy metadata stays on the server.
    text = json.dumps(schemas)
    assert "allowlist" not in text and "confirmation" not in text and '"tier"' not in text


@pytest.mark.parametrize("settings", [None, {}, "model"], ids=["none", "mapping", "settings-model"])
def test_default_registry_accepts_settings(settings: Any, tmp_path: Any) -> None:
    if settings == "model":
        settings = Settings(data_dir=tmp_path, approval_secret="x" * 32)
    registry = default_registry(settings)
    assert [t.name for t in registry.tools] == ["calendar", "mail", "tasks", "notes", "reminders", "triggers"]
    summary = registry.capability_summary()
    for tool in registry.tools:
        assert tool.capability_phrase in summary


def _action(name: str, **kw: Any) -> ActionSpec:
    class Args(ArgsModel):
        pass

    async def run(ctx: ExecContext, args: Any) -> ActionResult:
        raise AssertionError("never runs")

    return ActionSpec(name=name, description="An action.", args=Args, tier="allowlist", executor=run,
                      renderer=lambda r: r["summary"], usage_examples=(), **kw)


def test_a_name_that_reads_as_a_hard_delete_must_declare_it_or_be_acknowledged() -> None:
    with pytest.raises(ValueError, match="reads as a hard delete but declares effect='write'"):
        _action("delete_email", effect="write")
    with pytest.raises(ValueError, match="reads as a hard delete"):
        _action("purge")  # effect defaults to read
    assert _action("delete_email", effect="write", destructive_name_acknowledged=True).effect == "write"
    assert _action("delete_email", effect="destructive").writes
    assert _action("tidy", effect="destructive").effect == "destructive"  # an innocent name declares it
    with pytest.raises(ValueError, match="effect must be"):
        _action("list", effect="maybe")
