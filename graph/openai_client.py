"""The ``langchain-openai`` client for one configured provider (any OpenAI-compatible endpoint).

Its own module so that ``langchain_openai`` (and ``openai``, about 0.8 s to import together) is
loaded only by :func:`graph.llm.build_model` when a provider is configured; the offline picker
and the processes of the tests and benchmarks never pay for it.
"""

from __future__ import annotations

from typing import Any

from langchain_core.outputs import ChatGenerationChunk
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from graph.model_settings import ProviderSettings

__all__ = ["CompatibleChatOpenAI", "client"]


class CompatibleChatOpenAI(ChatOpenAI):
    """``ChatOpenAI`` that also keeps the ``reasoning_content`` deltas many compatible servers send.

    vLLM, Ollama and llama.cpp stream reasoning models' summaries as a non-standard
    ``reasoning_content`` (or ``reasoning``) field, which the base client drops; we keep it
    in ``additional_kwargs`` so the graph can emit it as its own event kind.
    """

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
    """The chat model that talks to provider ``p``."""
    return CompatibleChatOpenAI(
        model=p.model,
        base_url=p.base_url,
        api_key=p.api_key or SecretStr("not-needed"),  # local servers accept any key
        timeout=p.timeout_seconds,
        max_retries=0,  # retries are ours (tenacity), so a failing provider hands over quickly
        stream_usage=True,
    )
