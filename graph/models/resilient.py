"""A chat model that survives its providers: retries, then the next provider, then a fallback.

429, 5xx, timeouts and connection errors retry with exponential backoff and jitter within a
per-provider attempt and time budget (tenacity); other API errors (401, 404, 400) move to the
next provider at once. When every provider has failed, the fallback model answers (the
offline picker for picking); with no fallback, :class:`policies.errors.Unavailable` is raised
and the caller degrades (the naturalizer falls back to grounded renderers).

What happened is recorded on the answer's ``response_metadata``: ``tollgate_provider`` (who
answered) and ``tollgate_fallbacks`` (each provider that failed, with the failure kind), so
the graph can emit a ``model_fallback`` event and write the usage ledger.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import ConfigDict
from tenacity import AsyncRetrying, Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_random_exponential

from tollgate.graph.models.chat_completions import ChatCompletionsModel, ProviderError
from tollgate.graph.observe import metrics
from tollgate.policies.errors import Unavailable

__all__ = ["ModelsUnavailable", "Provider", "ResilientChatModel", "failure_kind"]

_log = logging.getLogger(__name__)


class ModelsUnavailable(Unavailable):
    """Every provider failed and no fallback is set: ``failures`` names each (provider, error kind)."""

    def __init__(self, failures: list[dict[str, str]]) -> None:
        self.failures = list(failures)
        super().__init__("every model provider")


@dataclass(frozen=True, slots=True)
class Provider:
    """One configured endpoint and the chat model that talks to it."""

    name: str
    """Label for events and the usage ledger."""
    model: ChatCompletionsModel
    """The client of the endpoint."""
    model_name: str
    """The model the endpoint serves."""
    strict: bool = False
    """Bind tools in strict mode."""
    close: Callable[[], Awaitable[None]] | None = None
    """Closes the client's connections (``None``: nothing to close)."""


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, ProviderError) and exc.retryable


def failure_kind(exc: BaseException) -> str:
    """A short, secret-free name for a provider failure: its :class:`ProviderError` kind (the
    client reports every failure of the call as one), else the class's name."""
    return exc.kind if isinstance(exc, ProviderError) else type(exc).__name__


class ResilientChatModel(BaseChatModel):
    """Tries each provider in order (with retries), then the fallback model.

    One LangChain run per answer, this model's: it calls its providers' clients directly
    (:meth:`~graph.models.chat_completions.ChatCompletionsModel.astream_answer`) rather than
    through a second chat model run of their own (its config, callbacks and chunk merging).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    providers: list[Provider]
    """Ordered providers."""
    fallback: BaseChatModel | None = None
    """Answers when every provider failed (the offline picker), or ``None``."""
    max_attempts: int = 3
    """Attempts per provider for retryable failures."""
    budget_seconds: float = 20.0
    """Time budget per provider for those attempts."""
    min_wait_seconds: float = 0.2
    """Base of the exponential backoff (jittered)."""

    @property
    def _llm_type(self) -> str:
        return "tollgate-resilient"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        """Bind ``tools`` in the API's function format; a strict provider gets their strict form."""
        return self.bind(tools=ChatCompletionsModel.tool_schemas(tools), **kwargs)

    async def aclose(self) -> None:
        """Close every provider's connections; the model cannot call them afterwards."""
        for provider in self.providers:
            if provider.close is not None:
                await provider.close()

    def _retry_policy(self) -> dict[str, Any]:
        return {
            "stop": stop_after_attempt(self.max_attempts) | stop_after_delay(self.budget_seconds),
            "wait": wait_random_exponential(multiplier=self.min_wait_seconds, max=4.0),
            "retry": retry_if_exception(_retryable),
            "reraise": True,
        }

    def _retrying(self) -> AsyncRetrying:
        return AsyncRetrying(**self._retry_policy())

    @staticmethod
    def _params(provider: Provider, tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        """The request's ``tools`` for ``provider``: the bound ones, or their strict form."""
        if not tools:
            return {}
        if provider.strict:
            from tollgate.tools.registry import strict_function_schema

            return {"tools": ChatCompletionsModel.tool_schemas([strict_function_schema(t) for t in tools], strict=True)}
        return {"tools": tools}

    @staticmethod
    def _mark(message: BaseMessage, provider: str, model: str, failures: list[dict[str, str]]) -> None:
        message.response_metadata["tollgate_provider"] = provider
        message.response_metadata["tollgate_model"] = model
        message.response_metadata["tollgate_fallbacks"] = list(failures)

    @staticmethod
    def _failed(failures: list[dict[str, str]], provider: str, exc: Exception) -> None:
        """Note that ``provider`` failed (its error kind only, never the message), and log it."""
        kind = failure_kind(exc)
        failures.append({"provider": provider, "error": kind})
        metrics.MODEL_ERRORS.labels(provider, kind).inc()
        _log.warning("model provider %s failed (%s)", provider, kind)

    def _fallback_for(self, tools: list[Any] | None, failures: list[dict[str, str]] | None = None) -> Any:
        """The offline fallback, with the turn's tools bound; :class:`ModelsUnavailable` without one."""
        if self.fallback is None:
            raise ModelsUnavailable(failures or [])
        return self.fallback.bind_tools(tools) if tools else self.fallback

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        """The same order as :meth:`_agenerate`, for synchronous callers (scripts, notebooks)."""
        tools: list[Any] | None = kwargs.get("tools")
        failures: list[dict[str, str]] = []
        for provider in self.providers:
            params = self._params(provider, tools)
            try:
                for attempt in Retrying(**self._retry_policy()):
                    with attempt:
                        message = provider.model.answer(messages, stop=stop, **params)
            except Exception as exc:  # noqa: BLE001 - any provider failure moves to the next one
                self._failed(failures, provider.name, exc)
                continue
            self._mark(message, provider.name, provider.model_name, failures)
            return ChatResult(generations=[ChatGeneration(message=message)])
        message = self._fallback_for(tools, failures).invoke(messages)
        self._mark(message, "offline", "offline", failures)
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        tools: list[Any] | None = kwargs.get("tools")
        failures: list[dict[str, str]] = []
        for provider in self.providers:
            params = self._params(provider, tools)
            try:
                async for attempt in self._retrying():
                    with attempt:
                        message = await provider.model.aanswer(messages, stop=stop, **params)
            except Exception as exc:  # noqa: BLE001 - any provider failure moves to the next one
                self._failed(failures, provider.name, exc)
                continue
            self._mark(message, provider.name, provider.model_name, failures)
            return ChatResult(generations=[ChatGeneration(message=message)])
        message = await self._fallback_for(tools, failures).ainvoke(messages)
        self._mark(message, "offline", "offline", failures)
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _astream(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        """The first provider that opens its stream, streamed as it answers (text and tool calls),
        with the turn's tools bound; the fallback's whole answer as one chunk when all failed."""
        tools: list[Any] | None = kwargs.get("tools")
        failures: list[dict[str, str]] = []
        for provider in self.providers:
            stream: AsyncIterator[AIMessageChunk] | None = None
            first: Any = None
            params = self._params(provider, tools)
            try:
                async for attempt in self._retrying():
                    with attempt:
                        # Retrying is only safe until the first token: open the stream and
                        # read one chunk inside the retry; afterwards a failure propagates.
                        stream = provider.model.astream_answer(messages, stop=stop, **params).__aiter__()
                        first = await stream.__anext__()
            except StopAsyncIteration:
                first, stream = AIMessageChunk(content=""), None
            except Exception as exc:  # noqa: BLE001 - any provider failure moves to the next one
                self._failed(failures, provider.name, exc)
                continue
            self._mark(first, provider.name, provider.model_name, failures)
            yield ChatGenerationChunk(message=first)
            if stream is not None:
                async for chunk in stream:
                    yield ChatGenerationChunk(message=chunk)
            return
        answer = await self._fallback_for(tools, failures).ainvoke(messages)
        chunk = _as_chunk(answer)
        self._mark(chunk, "offline", "offline", failures)
        yield ChatGenerationChunk(message=chunk)


def _as_chunk(answer: Any) -> AIMessageChunk:
    """A whole answer as one chunk, its tool calls included (as the chunks a stream would carry)."""
    if not isinstance(answer, AIMessage):
        return AIMessageChunk(content="")
    calls = [{"name": c["name"], "args": json.dumps(c["args"]), "id": c.get("id"), "index": i}
             for i, c in enumerate(answer.tool_calls)]
    return AIMessageChunk(content=answer.content, tool_call_chunks=calls, usage_metadata=answer.usage_metadata,
                          response_metadata=dict(answer.response_metadata))
