"""Decoding the picker model's answer into a plan (private helpers of :mod:`nodes.picker`)."""

from __future__ import annotations

import re
import types
import typing
import uuid
from typing import Any, Final

from langchain_core.messages import AIMessage
from langchain_core.messages.tool import ToolCall

from tollgate.graph.state import Plan
from tollgate.nodes.menu import Menu
from tollgate.policies.arguments import validate_args
from tollgate.policies.counts import clamp_count, explicit_count
from tollgate.policies.storable import MAX_DEPTH, depth_of, storable
from tollgate.tools.registry import ActionSpec, Registry

__all__ = ["decode_call", "is_capability_question", "message_text", "normalized_calls", "storable_answer", "usage_record"]

_CAPABILITY: Final = re.compile(
    r"^\s*(?:what\s+(?:can|could)\s+you\s+(?:do|help(?:\s+me)?\s+with)|help|what\s+are\s+your\s+(?:capabilities|skills|features)"
    r"|what\s+do\s+you\s+do|how\s+can\s+you\s+help(?:\s+me)?)\s*[?.!]*\s*$",
    re.I,
)


def is_capability_question(text: str) -> bool:
    """Whether the request asks what Tollgate can do (answered from the registry alone)."""
    return bool(_CAPABILITY.match(text))


def _accepts_none(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _accepts_none(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(a is type(None) for a in typing.get_args(annotation))
    return annotation is type(None)


def _drop_nulls(action: ActionSpec, args: object) -> object:
    """Strict-mode models send ``null`` for "not given": drop it where the field is not nullable."""
    if not isinstance(args, dict):
        return args
    fields = action.args.model_fields
    return {
        k: v for k, v in args.items() if not (v is None and k in fields and not _accepts_none(fields[k].annotation))
    }


def _apply_count(action: ActionSpec, args: dict[str, Any], request: str) -> dict[str, Any]:
    """A count the user typed overrides the model's, clamped to the action's bounds."""
    field = action.args.model_fields.get("limit")
    count = explicit_count(request)
    if field is None or count is None:
        return args
    lo, hi = 1, count
    for meta in field.metadata:
        lo = getattr(meta, "ge", lo) if getattr(meta, "ge", None) is not None else lo
        hi = getattr(meta, "le", hi) if getattr(meta, "le", None) is not None else hi
    return args | {"limit": clamp_count(count, lo, hi)}


def decode_call(registry: Registry, menu: Menu, call: ToolCall, request: str) -> tuple[Plan | None, list[str]]:
    """Strictly decode one tool call into a plan, or return the violations.

    A registered function outside the menu is refused as not offered, except operator-only
    and blocklisted ones, which decode so the tier gate refuses them with its own reason.
    """
    name = call.get("name") or ""
    found = registry.lookup(name)
    if found is None:
        return None, [f"unknown function {name[:64]!r}; call one of the functions offered"]
    tool, action = found
    if name not in menu.names and action.tier in ("allowlist", "confirmation"):
        return None, [f"function {name[:64]!r} is not offered for this request; call one of the functions offered"]
    verdict = validate_args(action.args, _drop_nulls(action, call.get("args")))
    if not verdict.ok or verdict.value is None:
        return None, list(verdict.violations)
    args = _apply_count(action, verdict.value.model_dump(mode="json", exclude_none=True), request)
    plan = Plan(
        call_id=str(call.get("id") or f"call_{uuid.uuid4().hex[:12]}"),
        tool=tool.name,
        action=action.name,
        args=args,
    )
    return plan, []


INVALID_JSON: Final = "the arguments were not valid JSON"


def normalized_calls(message: AIMessage) -> tuple[AIMessage, dict[str, list[str]]]:
    """The answer with every call, valid or not, as a tool call with a unique id, and the calls
    already known to be invalid (their id -> violations).

    A call whose arguments did not parse becomes a call with no arguments (so each call of the
    answer gets its tool message and the exchange stays valid), and so does a call without an id
    or with one another call of the answer already uses.
    """
    calls: list[ToolCall] = []
    bad: dict[str, list[str]] = {}
    seen: set[str] = set()
    raw = [(c, False) for c in message.tool_calls] + [
        ({"name": str(c.get("name") or "unknown"), "args": {}, "id": c.get("id"), "type": "tool_call"}, True)
        for c in message.invalid_tool_calls
    ]
    changed = bool(message.invalid_tool_calls)
    for call, invalid in raw:
        call_id = str(call.get("id") or "")
        if not call_id or call_id in seen:
            call_id, changed = f"call_{uuid.uuid4().hex[:12]}", True
        seen.add(call_id)
        name = str(call.get("name") or "unknown")
        changed |= name != call.get("name") or call.get("args") is None
        calls.append(ToolCall(name=name, args=call.get("args") or {}, id=call_id, type="tool_call"))
        if invalid:
            bad[call_id] = [INVALID_JSON]
    # Compared field by field, never by ``==`` on the arguments: that recurses as deep as they nest.
    if not changed:
        return message, bad
    return message.model_copy(update={"tool_calls": calls, "invalid_tool_calls": []}), bad


def storable_answer(message: AIMessage) -> tuple[AIMessage, bool]:
    """The answer as the turn's state may keep it, and whether a call's arguments nest too deep.

    A model's text and arguments are third-party content as far as storage goes: NUL and lone
    surrogates are replaced and arguments nested deeper than :data:`~policies.storable.MAX_DEPTH`
    are dropped, in a copy (the original is what gets decoded, and refused).
    """
    deep = [depth_of(c.get("args")) > MAX_DEPTH for c in message.tool_calls]
    kept = [storable(c.get("args")) if not d else None for c, d in zip(message.tool_calls, deep, strict=True)]
    calls = [c | {"args": {} if k is None else k.value} for c, k in zip(message.tool_calls, kept, strict=True)]
    too_deep = any(deep)
    content = storable(message.content)
    # Judged by what storable changed, never by ``==`` on the arguments (it recurses as deep as they nest).
    if not too_deep and not content.changed and not any(k is not None and k.changed for k in kept):
        return message, False
    content = content.value
    return message.model_copy(update={"tool_calls": calls, "content": content}), too_deep


def message_text(message: AIMessage) -> str:
    """The text content of an AI message."""
    content = message.content
    if isinstance(content, str):
        return content.strip()
    parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
    return "".join(str(p) for p in parts).strip()


def usage_record(role: str, message: AIMessage, prompt_chars: int) -> dict[str, Any] | None:
    """A usage-ledger row for an answer from a configured provider (``None`` for the offline picker)."""
    meta = message.response_metadata
    provider = meta.get("tollgate_provider")
    if provider is None or provider == "offline":
        return None
    usage = message.usage_metadata
    if usage:
        return {"role": role, "provider": provider, "model": meta.get("tollgate_model", ""),
                "input_tokens": int(usage.get("input_tokens", 0)), "output_tokens": int(usage.get("output_tokens", 0)),
                "estimated": False}
    # No usage block: estimate at about four characters a token.
    out_chars = len(message_text(message)) + sum(len(str(c.get("args", ""))) for c in message.tool_calls)
    return {"role": role, "provider": provider, "model": meta.get("tollgate_model", ""),
            "input_tokens": max(1, prompt_chars // 4), "output_tokens": max(1, out_chars // 4), "estimated": True}
