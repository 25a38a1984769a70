"""Chat models from settings: OpenAI-compatible providers behind retries and fallbacks.

* :mod:`graph.models.model_settings` — the providers' configuration.
* :mod:`graph.models.llm` — :func:`~graph.models.llm.build_model` and
  :func:`~graph.models.llm.close_model`.
* :mod:`graph.models.resilient` — retries, then the next provider, then the fallback.
* :mod:`graph.models.openai_client` — the ``langchain-openai`` client of one provider (imported
  only when a provider is configured).
"""

__all__: list[str] = []
