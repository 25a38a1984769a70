"""Chat models from settings: ``langchain-openai`` clients behind :class:`ResilientChatModel`."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.outputs import ChatGenerationChunk
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from graph.model_settings import ProviderSettings, Role, resolve_providers
from graph.resilient import Provider, ResilientChatModel
from graph.settings import Settings

__all__ = ["CompatibleChatOpenAI", "build_model"]


class CompatibleChatOpenAI(ChatOpenAI):
    """``ChatOpenAI`` that also keeps the ``reasoning_content`` deltas many compatible servers send.

    vLLM, Ollama and llama.cpp stream reasoning models' summaries as a non-standard
    ``reasoning_content`` (or ``reasoning``) field, which the base client drops; we keep it
    in ``additional_kwargs`` so the graph can emit it as its own event kind.
    """

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


def _client(p: ProviderSettings) -> ChatOpenAI:
    return CompatibleChatOpenAI(
        model=p.model,
        base_url=p.base_url,
        api_key=p.api_key or SecretStr("not-needed"),  # local servers accept any key
        timeout=p.timeout_seconds,
        max_retries=0,  # retries are ours (tenacity), so a failing provider hands over quickly
        stream_usage=True,
    )


def build_model(settings: Settings, role: Role, *, fallback: BaseChatModel | None) -> BaseChatModel | None:
    """The model for ``role``; ``fallback`` alone when no provider is configured.

    Raises :class:`graph.model_settings.ModelConfigError` for an unusable configuration.
    """
    providers = resolve_providers(
        role,
        settings.picker_providers if role == "picker" else settings.naturalizer_providers,
        model=settings.picker_model if role == "picker" else settings.naturalizer_model,
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key,
    )
    if not providers:
        return fallback
    return ResilientChatModel(
        providers=[Provider(p.name, _client(p), p.model, p.strict) for p in providers],
        fallback=fallback,
        max_attempts=settings.model_max_attempts,
        budget_seconds=settings.model_retry_budget_seconds,
    )
