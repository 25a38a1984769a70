"""Chat models from settings: Chat Completions clients behind :class:`ResilientChatModel`."""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel

from tollgate.graph.models.chat_completions import ChatCompletionsModel
from tollgate.graph.models.model_settings import Role, resolve_providers
from tollgate.graph.models.resilient import Provider, ResilientChatModel
from tollgate.graph.settings import Settings

__all__ = ["build_model", "close_model"]


def build_model(settings: Settings, role: Role, *, fallback: BaseChatModel | None) -> BaseChatModel | None:
    """The model for ``role``; ``fallback`` alone when no provider is configured.

    Raises :class:`graph.models.model_settings.ModelConfigError` for an unusable configuration. The
    caller closes a model it built with :func:`close_model`.
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
    chats = [(p, ChatCompletionsModel(base_url=p.base_url, model=p.model, api_key=p.api_key, timeout=p.timeout_seconds))
             for p in providers]
    return ResilientChatModel(
        providers=[Provider(p.name, chat, p.model, p.strict, close=chat.aclose) for p, chat in chats],
        fallback=fallback,
        max_attempts=settings.model_max_attempts,
        budget_seconds=settings.model_retry_budget_seconds,
    )


async def close_model(model: BaseChatModel | None) -> None:
    """Close the connections of a model :func:`build_model` made (any other model is left alone)."""
    if isinstance(model, ResilientChatModel):
        await model.aclose()
