"""A deterministic chat model for benchmarks (it stands in for a model, nothing else).

It answers a human message with one tool call and anything after a tool result with text,
so Tollgate's picker and a bare ``create_agent`` loop make the same two model calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict

__all__ = ["CyclicModel"]


class CyclicModel(BaseChatModel):
    """Tool call on a new request, plain text after a tool result."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    call: Callable[[str], tuple[str, dict[str, Any]]]
    """Maps the request text to (function name, args)."""
    reply: str = ""
    """The text returned after a tool result."""
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "cyclic"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=list(tools), **kwargs)

    def _answer(self, messages: list[BaseMessage]) -> ChatResult:
        self.calls += 1
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.reply))])
        human = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
        name, args = self.call(human.text)
        message = AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{self.calls}", "type": "tool_call"}])
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        return self._answer(messages)

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        return self._answer(messages)
