"""Governing a LangChain tool: :func:`from_langchain` wraps any ``BaseTool`` (an ``@tool`` function included).

The wrapped tool gets what every Tollgate tool has: a closed, frozen argument model (the
tool's own schema with unknown keys refused and types checked strictly), a tier and a declared
effect chosen by whoever registers it (never by the tool), a preview for confirmation writes,
and id fields bound against what the server returned. Its output becomes the result's
structured ``content`` (JSON values; anything else as text), shown to the model fenced as data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from langchain_core.tools import BaseTool
from pydantic import BaseModel, create_model

from tollgate.policies.arguments import ArgsModel
from tollgate.policies.tiers import Effect, Tier, looks_destructive
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, IdKind, Previewer, ToolSpec, template_preview

__all__ = ["from_langchain"]

_NAME: Final = re.compile(r"[^A-Za-z0-9_]")
_SUMMARY_CHARS: Final = 300


def _identifier(name: str) -> str:
    cleaned = _NAME.sub("_", name).strip("_") or "tool"
    return cleaned if not cleaned[0].isdigit() else "t_" + cleaned


def _closed_args(tool: BaseTool, name: str) -> type[ArgsModel]:
    """The tool's argument model, closed and frozen (the same fields, validators and defaults)."""
    schema = tool.args_schema
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise ValueError(f"LangChain tool {tool.name!r}: only a pydantic args_schema can be governed")
    fields = {field: (info.annotation, info) for field, info in schema.model_fields.items()}
    return create_model(f"{name.title().replace('_', '')}Args", __base__=ArgsModel, __doc__=tool.description,
                        **fields)  # type: ignore[call-overload,no-any-return]


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return str(value)
    return value


def from_langchain(
    tool: BaseTool,
    *,
    tier: Tier,
    effect: Effect = "read",
    preview: Previewer | str | None = None,
    id_fields: Mapping[str, str] | None = None,
    id_kinds: tuple[IdKind, ...] = (),
    name: str | None = None,
    capability_phrase: str | None = None,
    usage_examples: tuple[str, ...] = (),
    idempotent: bool | None = None,
    destructive_name_acknowledged: bool = False,
) -> ToolSpec:
    """A Tollgate tool of one action (``run``) that calls ``tool``.

    ``tier`` and ``effect`` are the registrant's classification. ``preview`` (a previewer, or
    a template over the arguments such as ``"Share '{name}' with {email}"``) is required for
    ``tier="confirmation"``. The tool's name becomes the Tollgate tool name (``name``
    overrides it), so the model calls ``<name>__run``. A write is not retried after a transient
    failure unless ``idempotent`` says it may be.

    Raises ``ValueError`` for a tool whose arguments are not a pydantic model, and (as for any
    action) for a tool whose name reads as a hard delete but declares a milder effect, unless
    ``destructive_name_acknowledged``.
    """
    tool_name = _identifier(name or tool.name)
    if looks_destructive(tool_name) and effect != "destructive" and not destructive_name_acknowledged:
        raise ValueError(f"LangChain tool {tool_name!r} reads as a hard delete but declares effect={effect!r}: "
                         "declare effect='destructive', or pass destructive_name_acknowledged=True")
    args_model = _closed_args(tool, tool_name)

    async def run(ctx: ExecContext, args: BaseModel) -> ActionResult:
        output = await tool.ainvoke(args.model_dump(mode="python", exclude_unset=True))
        content = getattr(output, "content", output)  # a ToolMessage or Command-free artifact
        if isinstance(content, str):
            summary = content if len(content) <= _SUMMARY_CHARS else content[: _SUMMARY_CHARS - 1] + "…"
        else:
            summary = f"{tool_name.replace('_', ' ')} returned a result."
        result = ActionResult(tool=tool_name, action="run", kind="write" if effect != "read" else "item",
                              summary=summary, content=_jsonable(content))
        if effect != "read":
            result["changed"] = 1
        return result

    render = preview if not isinstance(preview, str) else template_preview(preview)
    action = ActionSpec(
        name="run",
        description=(tool.description or tool_name).strip().splitlines()[0][:500],
        args=args_model,
        tier=tier,
        executor=run,
        renderer=lambda result: result["summary"],
        usage_examples=usage_examples,
        id_fields=dict(id_fields or {}),
        preview=render,
        idempotent=(effect == "read") if idempotent is None else idempotent,
        effect=effect,
    )
    return ToolSpec(
        name=tool_name,
        description=(tool.description or tool_name).strip().splitlines()[0][:200],
        capability_phrase=capability_phrase or f"use {tool_name.replace('_', ' ')}",
        actions=(action,),
        id_kinds=id_kinds,
    )
