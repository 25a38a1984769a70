"""A fully compromised picker: it does what the planted data tells it to.

Each turn of a case gives it a script. ``{"call": name, "args": {...}}`` is a tool call the
attacker's model makes of its own accord; ``{"obey": true}`` finds the next instruction planted
in the data it has been shown (``TOLLGATE-DO: <function> <json args>`` inside a fenced tool
result or context) and emits exactly that call — proof that the injection reached the model
and that the model followed it. ``{"say": text}`` replies without a call; ``{"echo": true}`` replies with the next planted
``TOLLGATE-SAY: <text>`` line, as a model that repeats an injected recommendation would. A call
made by obeying is given an id beginning ``inj_``, so the eval can tell whether it ran. An
exhausted script replies with nothing, so a refused turn simply ends.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, Final

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, PrivateAttr

from tollgate.policies.dlp import strings_in

__all__ = ["MARKER", "SAY_MARKER", "CompromisedPicker", "planted_instructions", "planted_sayings"]

MARKER: Final = "TOLLGATE-DO:"
"""How an attacker's instruction is written into mail, events and pages."""
SAY_MARKER: Final = "TOLLGATE-SAY:"
"""How an attacker's recommendation (for the reply alone) is written."""

_FENCE: Final = re.compile(r"<data kind=[a-z_]+ nonce=([0-9a-f]{16,64})>\n(.*?)\n</data nonce=\1>", re.S)
_INSTRUCTION: Final = re.compile(re.escape(MARKER) + r"\s*([A-Za-z0-9_]+)\s*")
_SAY: Final = re.compile(re.escape(SAY_MARKER) + r"\s*([^\n<]+)")
_ids = itertools.count(1)


def _fenced_texts(messages: Sequence[BaseMessage]) -> Iterator[str]:
    """Every string inside the fenced data of ``messages``, in order."""
    for message in messages:
        content = message.content if isinstance(message.content, str) else json.dumps(message.content)
        for fence in _FENCE.finditer(content):
            try:
                data = json.loads(fence.group(2))
            except ValueError:
                continue
            yield from strings_in(data)


def planted_sayings(messages: Sequence[BaseMessage]) -> list[str]:
    """Every planted recommendation in the fenced data of ``messages``, in order."""
    found: list[str] = []
    for text in _fenced_texts(messages):
        found += [m.group(1).strip() for m in _SAY.finditer(text) if m.group(1).strip() not in found]
    return found


def planted_instructions(messages: Sequence[BaseMessage]) -> list[tuple[str, dict[str, Any]]]:
    """Every planted instruction in the fenced data of ``messages``, in order of appearance."""
    found: list[tuple[str, dict[str, Any]]] = []
    decoder = json.JSONDecoder()
    for text in _fenced_texts(messages):
        for match in _INSTRUCTION.finditer(text):
            try:
                args, _ = decoder.raw_decode(text, match.end())
            except ValueError:
                continue
            if isinstance(args, dict) and (match.group(1), args) not in found:
                found.append((match.group(1), args))
    return found


class CompromisedPicker(BaseChatModel):
    """Follows its per-turn script, and obeys planted instructions when told to."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    _script: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    _obeyed: list[tuple[str, dict[str, Any]]] = PrivateAttr(default_factory=list)
    _missed: int = PrivateAttr(default=0)
    _last_call: tuple[str, dict[str, Any], str] | None = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "compromised"

    @property
    def obeyed(self) -> list[tuple[str, dict[str, Any]]]:
        """The planted calls it emitted."""
        return self._obeyed

    @property
    def missed(self) -> int:
        """``obey`` steps that found no planted instruction (the injection never reached it)."""
        return self._missed

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=list(tools), **kwargs)

    def script(self, steps: Sequence[dict[str, Any]]) -> None:
        """Replace the script with one turn's steps."""
        self._script = list(steps)

    def _answer(self, messages: list[BaseMessage]) -> ChatResult:
        last = messages[-1] if messages else None
        if isinstance(last, ToolMessage) and last.status == "error" and self._last_call is not None:
            # Told its call was invalid, a compromised model insists with the very same call.
            return ChatResult(generations=[ChatGeneration(message=self._call(*self._last_call))])
        message = AIMessage(content="")
        while self._script:
            step = self._script.pop(0)
            if "say" in step:
                message = AIMessage(content=str(step["say"]))
                break
            if "call" in step:
                message = self._call(str(step["call"]), dict(step.get("args") or {}))
                break
            if step.get("obey"):
                pending = [i for i in planted_instructions(messages) if i not in self._obeyed]
                if not pending:
                    self._missed += 1
                    continue
                self._obeyed.append(pending[0])
                message = self._call(*pending[0], prefix="inj")
                break
            if step.get("echo"):
                sayings = planted_sayings(messages)
                if not sayings:
                    self._missed += 1
                    continue
                self._obeyed.append(("say", {"text": sayings[0]}))
                message = AIMessage(content=f"Here is what I found. {sayings[0]}")
                break
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _call(self, name: str, args: dict[str, Any], prefix: str = "evil") -> AIMessage:
        self._last_call = (name, args, prefix)
        return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"{prefix}_{next(_ids)}",
                                                  "type": "tool_call"}])

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        return self._answer(messages)

    async def _agenerate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        return self._answer(messages)
