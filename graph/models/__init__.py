"""Chat models from settings: OpenAI-compatible providers behind retries and fallbacks.

* :mod:`graph.models.model_settings` — the providers' configuration.
* :mod:`graph.models.llm` — :func:`~graph.models.llm.build_model` and
  :func:`~graph.models.llm.close_model`.
* :mod:`graph.models.resilient` — retries, then the next provider, then the fallback.
* :mod:`graph.models.chat_completions` — the chat model of one provider: the Chat Completions
  API over aiohttp.
* :mod:`graph.models.tool_calls` — a tool call from its raw parts (arguments a JSON object, or
  an invalid call), for whole and streamed answers alike.
"""

__all__: list[str] = []
