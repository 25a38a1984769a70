"""``OfflinePicker``: a LangChain chat model that picks tool calls with no model configured.

It reads exactly what a remote model would read (the picker prompt of
:mod:`nodes.picker_prompt`) and answers like one: an ``AIMessage`` with one tool call, or
with text. It only ever calls functions that were bound, its arguments validate against the
action's closed model, and it is deterministic: same messages and tools, same answer.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.tool import tool_call
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from tollgate.nodes.offline.functions import KNOWN, bound_functions, resolve_function
from tollgate.nodes.offline.examples import examples_of
from tollgate.nodes.offline.intents import Routes, decide
from tollgate.nodes.offline.plan import Direct, Plan, Reply, clarify
from tollgate.nodes.picker_prompt import context_of
from tollgate.policies.arguments import validate_args

__all__ = ["OfflinePicker"]

_PROVIDER = "tollgate-offline"


class OfflinePicker(BaseChatModel):
    """The embedded offline picker: rules over the picker prompt, no network, no randomness.

    ``response_metadata["outcome"]`` says what it did: ``call``, ``reply``, ``clarify`` or
    ``done`` (a step already ran this turn, so the graph renders the result).
    """

    @property
    def _llm_type(self) -> str:
        return _PROVIDER

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind OpenAI-style function schemas; ``tool_choice`` and ``strict`` are accepted and ignored.

        The picker never forces a call: a request it cannot map gets a question instead.
        """
        kwargs.pop("strict", None)
        kwargs.pop("parallel_tool_calls", None)
        del tool_choice
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.respond(messages, kwargs.get("tools") or ()))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.respond(messages, kwargs.get("tools") or ()))])

    def respond(self, messages: Sequence[BaseMessage], tools: Sequence[Mapping[str, Any]] = ()) -> AIMessage:
        """The answer to a picker prompt given the bound ``tools`` (OpenAI-style dicts)."""
        last_human = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=None)
        if last_human is None:
            return _text(clarify("What would you like me to do?"))
        if any(isinstance(m, ToolMessage) for m in messages[last_human + 1 :]):
            return AIMessage(content="", response_metadata={"model_provider": _PROVIDER, "outcome": "done"})
        request = messages[last_human].text
        context = context_of(list(messages))
        bound = bound_functions(tools)
        routes = _routes(tools, bound)
        halves = two_requests(request)
        if halves is not None:
            # "Add a task to call the bank and remind me tomorrow at 9 to send the invoice": both
            # halves, as two calls of one answer (one approval card lists both), when each is a call.
            answers = [_message(decide(half, context, routes), bound, half, context) for half in halves]
            if all(a.tool_calls for a in answers):
                return AIMessage(content="", tool_calls=[c for a in answers for c in a.tool_calls],
                                 response_metadata={"model_provider": _PROVIDER, "outcome": "call"})
        plan = decide(request, context, routes)
        return _message(plan, bound, request, context)


_SECOND_REQUEST: Final = re.compile(
    r",?\s+(?:and|then|and\s+then|also)\s+(?=(?:please\s+)?(?:remind\s+me|add|create|schedule|book|e-?mail|send|cancel|"
    r"put|set\s+(?:a|up)|move|reschedule|mark|trash|delete|note|jot|save|log)\b)", re.I)


def two_requests(request: str) -> tuple[str, str] | None:
    """A request that asks for two things, split where the second opens with its own command verb;
    ``None`` for one request ("remind me to buy milk and eggs" is one)."""
    parts = _SECOND_REQUEST.split(request, maxsplit=1)
    if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
        return None
    return parts[0].strip(), parts[1].strip()


def _routes(tools: Sequence[Mapping[str, Any]], bound: Mapping[str, Mapping[str, Any]]) -> Routes:
    """The bound functions' usage examples, and which of them the grammar serves itself."""
    descriptions = {
        str(t["function"]["name"]): str(t["function"].get("description") or "")
        for t in tools if t.get("type") == "function" and isinstance(t.get("function"), Mapping)
    }
    known = frozenset(name for key in KNOWN if (name := resolve_function(key, bound)) is not None)
    return Routes(tuple(examples_of(bound, descriptions)), known)


def _text(plan: Reply) -> AIMessage:
    return AIMessage(content=plan.text, response_metadata={"model_provider": _PROVIDER, "outcome": plan.outcome})


def _message(plan: Plan, bound: Mapping[str, Mapping[str, Any]], request: str, context: Any) -> AIMessage:
    if isinstance(plan, Reply):
        return _text(plan)
    if isinstance(plan, Direct):
        if plan.function not in bound:
            return _text(clarify("I can't do that here: that action isn't available. Is there something else I can help with?"))
        return AIMessage(
            content="",
            tool_calls=[tool_call(name=plan.function, args=plan.args,
                                  id=_call_id(request, context, plan.function, plan.args))],
            response_metadata={"model_provider": _PROVIDER, "outcome": "call"},
        )
    name = resolve_function(plan.key, bound)
    if name is None:
        return _text(clarify("I can't do that here: that action isn't available. Is there something else I can help with?"))
    verdict = validate_args(KNOWN[plan.key].args, plan.args)
    if not verdict.ok:  # a grammar bug must surface as a question, never as a malformed call
        return _text(clarify("I couldn't work out the details of that. Could you rephrase it?"))
    return AIMessage(
        content="",
        tool_calls=[tool_call(name=name, args=plan.args, id=_call_id(request, context, name, plan.args))],
        response_metadata={"model_provider": _PROVIDER, "outcome": "call"},
    )


def _call_id(request: str, context: Any, name: str, args: Mapping[str, Any]) -> str:
    """A deterministic tool-call id: a hash of the request, its context and the call."""
    material = json.dumps([request, context, name, args], sort_keys=True, ensure_ascii=True, default=str)
    return "call_" + hashlib.sha256(material.encode()).hexdigest()[:16]

