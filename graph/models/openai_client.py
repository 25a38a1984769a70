"""The ``langchain-openai`` client for one configured provider (any OpenAI-compatible endpoint).

Its own module so that ``langchain_openai`` (and ``openai``, about 0.8 s to import together) is
loaded only by :func:`graph.models.llm.build_model` when a provider is configured; the offline picker
and the processes of the tests and benchmarks never pay for it.

Two choices here are about a server with many turns in flight (measured in ``bench/README.md``):
the SDK's aiohttp transport (``openai.DefaultAioHttpClient``), whose connection pool does not
walk every open connection on each request as the default one does, and function schemas sent
as they are (:meth:`CompatibleChatOpenAI.bind_tools`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.runnables import Runnable, RunnableBinding
from langchain_core.tools import BaseTool
from langchain_openai import ChatOpenAI
from openai import DefaultAioHttpClient
from pydantic import SecretStr

from tollgate.graph.models.model_settings import ProviderSettings

__all__ = ["CompatibleChatOpenAI", "client", "close"]


class CompatibleChatOpenAI(ChatOpenAI):
    """``ChatOpenAI`` that also keeps the ``reasoning_content`` deltas many compatible servers send.

    vLLM, Ollama and llama.cpp stream reasoning models' summaries as a non-standard
    ``reasoning_content`` (or ``reasoning``) field, which the base client drops; we keep it
    in ``additional_kwargs`` so the graph can emit it as its own event kind.

    Function schemas travel in the request's ``extra_body`` (see :meth:`bind_tools`).
    """

    def bind_tools(
        self, tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind ``tools`` exactly as ``ChatOpenAI.bind_tools`` formats them, sent as they are.

        The request body is the same on the wire. The SDK sends ``extra_body`` untouched, where
        ``tools`` would first be walked against its typed request parameters on every call: the
        larger part of a request's cost with a registry's worth of schemas.
        """
        bound = super().bind_tools(tools, **kwargs)
        if self.use_responses_api is not False or not isinstance(bound, RunnableBinding) or "tools" not in bound.kwargs:
            # The Responses API takes tools in another shape, which LangChain converts from ``tools``.
            return bound
        rest = dict(bound.kwargs)
        extra_body = {**(self.extra_body or {}), **(rest.pop("extra_body", None) or {}), "tools": rest.pop("tools")}
        return self.bind(**rest, extra_body=extra_body)

    # The one private hook of a dependency: ChatOpenAI has no public way to keep a delta's extra
    # fields (LangChain's provider packages override this same method); the reasoning-delta test
    # in tests/test_models_http.py fails loudly if a release changes it.
    def _convert_chunk_to_generation_chunk(
        self, chunk: dict[str, Any], default_chunk_class: type, base_generation_info: dict[str, Any] | None
    ) -> ChatGenerationChunk | None:
        generation = super()._convert_chunk_to_generation_chunk(chunk, default_chunk_class, base_generation_info)
        choices = chunk.get("choices") or []
        if generation is not None and choices and isinstance(choices[0].get("delta"), dict):
            delta = choices[0]["delta"]
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                generation.message.additional_kwargs["reasoning_content"] = reasoning
        return generation


def client(p: ProviderSettings) -> ChatOpenAI:
    """The chat model that talks to provider ``p``; :func:`close` closes its connections."""
    return CompatibleChatOpenAI(
        model=p.model,
        base_url=p.base_url,
        api_key=p.api_key or SecretStr("not-needed"),  # local servers accept any key
        timeout=p.timeout_seconds,
        max_retries=0,  # retries are ours (tenacity), so a failing provider hands over quickly
        stream_usage=True,
        # The Chat Completions API, which every OpenAI-compatible server speaks, whatever the model's
        # name (LangChain moves some OpenAI models to the Responses API on its own).
        use_responses_api=False,
        http_async_client=DefaultAioHttpClient(timeout=p.timeout_seconds),
    )


async def close(model: ChatOpenAI) -> None:
    """Close the connections of a client made by :func:`client` (it cannot be used afterwards)."""
    if model.http_async_client is not None:
        await model.http_async_client.aclose()
