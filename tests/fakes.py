"""A scripted chat model: the only fake in the test suite (it stands in for a model)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, PrivateAttr

Step = AIMessage | Callable[[list[BaseMessage]], AIMessage]

_ids = itertools.count(1)


def call(name: str, args: dict[str, Any], call_id: str | None = None) -> AIMessage:
    """An AI message with one tool call."""
    return AIMessage(
        content="", tool_calls=[{"name": name, "args": args, "id": call_id or f"call_{next(_ids)}", "type": "tool_call"}]
    )


def calls(*pairs: tuple[str, dict[str, Any]]) -> AIMessage:
    """An AI message with several tool calls (``(name, args)`` pairs), as a model answers in parallel."""
    return AIMessage(content="", tool_calls=[
        {"name": name, "args": args, "id": f"call_{next(_ids)}", "type": "tool_call"} for name, args in pairs])


def say(text: str) -> AIMessage:
    """An AI message with text and no tool call."""
    return AIMessage(content=text)


class ScriptedModel(BaseChatModel):
    """Returns its scripted steps in order; records every prompt; fails when the script runs out.

    Once the script is spent, a prompt whose last message is a tool result gets an answer with
    no text and no call (a model with nothing more to do: the graph then renders the results),
    unless ``strict``; any other prompt fails the test.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)
    steps: list[Any]
    strict: bool = False
    """Fail even when the prompt ends with a tool result and the script is spent."""
    latency: float = 0.0
    """Seconds each answer takes (as a real model's would), awaited before the step is taken."""
    on_call: Callable[[], None] | None = None
    """Called as each call starts, before its latency (fault-injection tests cancel a turn there)."""
    _prompts: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _tools: list[Any] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def prompts(self) -> list[list[BaseMessage]]:
        """Every prompt the model was given."""
        return self._prompts

    @property
    def bound_tools(self) -> list[Any]:
        """The function schemas bound by the last ``bind_tools``."""
        return self._tools

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        self._tools = list(tools)
        return self.bind(tools=list(tools), **kwargs)

    def _next(self, messages: list[BaseMessage]) -> ChatResult:
        self._prompts.append(list(messages))
        if not self.steps:
            if not self.strict and messages and isinstance(messages[-1], ToolMessage):
                return ChatResult(generations=[ChatGeneration(message=AIMessage(content=""))])
            raise AssertionError("ScriptedModel: script exhausted")
        step = self.steps.pop(0)
        message = step(messages) if callable(step) else step
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        return self._next(messages)

    async def _agenerate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        if self.on_call is not None:
            self.on_call()
        if self.latency:
            await asyncio.sleep(self.latency)
        return self._next(messages)

    def push(self, *steps: Step) -> None:
        """Append steps to the script."""
        self.steps.extend(steps)

    def assert_complete(self) -> None:
        """Fail when scripted steps were left over."""
        assert not self.steps, f"ScriptedModel: {len(self.steps)} scripted step(s) never used"
