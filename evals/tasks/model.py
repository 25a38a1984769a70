"""A scripted model that follows a multi-step task, the way a capable model would.

Each step of its script is one answer: some calls, or a final text. An argument may name what
an earlier step returned, as a model reads it from the tool results in its prompt: :class:`Row`
is the id of the newest listed row whose label contains a text, :class:`Item` a field of the
newest item a call returned. It never sees anything the runtime did not put in its prompt, so a
task completes only if the runtime carries every result to the next step. Once the script is
spent it answers with no text (the runtime then renders the results).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, PrivateAttr

from tollgate.policies.fencing import read_fence

__all__ = ["Calls", "Item", "Row", "Say", "Step", "TaskFollower"]

_ids = itertools.count(1)


@dataclass(frozen=True)
class Row:
    """The id of the newest listed row whose label contains ``label`` (case-insensitive)."""

    label: str


@dataclass(frozen=True)
class Item:
    """Field ``field`` of the newest item a call returned."""

    field: str


@dataclass(frozen=True)
class Calls:
    """One answer with these calls: ``(function, args)`` pairs."""

    calls: tuple[tuple[str, dict[str, Any]], ...]


@dataclass(frozen=True)
class Say:
    """The final answer."""

    text: str


Step = Calls | Say


def _results(prompt: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    out = []
    for message in prompt:
        if isinstance(message, ToolMessage) and message.status != "error":
            data = read_fence(str(message.content), "tool_result")
            if isinstance(data, dict):
                out.append(data)
    return out


def _resolve(value: Any, results: list[dict[str, Any]]) -> Any:
    if isinstance(value, Row):
        for data in reversed(results):
            for row in data.get("rows", []):
                if value.label.casefold() in str(row.get("label", "")).casefold():
                    return row["id"]
        raise LookupError(f"no listed row labelled like {value.label!r} in the prompt")
    if isinstance(value, Item):
        for data in reversed(results):
            if isinstance(data.get("item"), dict) and value.field in data["item"]:
                return data["item"][value.field]
        raise LookupError(f"no item with {value.field!r} in the prompt")
    if isinstance(value, dict):
        return {k: _resolve(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, results) for v in value]
    return value


class TaskFollower(BaseChatModel):
    """Answers each step of its script in turn, resolving references from the prompt."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    script: list[Any]
    _next: int = PrivateAttr(default=0)

    @property
    def _llm_type(self) -> str:
        return "task-follower"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=list(tools), **kwargs)

    def _answer(self, messages: list[BaseMessage]) -> ChatResult:
        if self._next >= len(self.script):
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=""))])
        step = self.script[self._next]
        self._next += 1
        if isinstance(step, Say):
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=step.text))])
        results = _results(messages)
        calls = [{"name": name, "args": _resolve(args, results), "id": f"call_{next(_ids)}", "type": "tool_call"}
                 for name, args in step.calls]
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=calls))])

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        return self._answer(messages)

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        return self._answer(messages)

    @property
    def finished(self) -> bool:
        """Whether every scripted step was answered."""
        return self._next >= len(self.script)
