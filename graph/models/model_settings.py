"""Model endpoint configuration: ordered OpenAI-compatible providers for the picker and naturalizer.

Configured with JSON lists (``TOLLGATE_PICKER_PROVIDERS``, ``TOLLGATE_NATURALIZER_PROVIDERS``)
or the shorthand ``OPENAI_BASE_URL`` + ``OPENAI_API_KEY`` + ``TOLLGATE_PICKER_MODEL`` /
``TOLLGATE_NATURALIZER_MODEL``. With none, Tollgate runs the embedded offline picker and the
grounded renderers. :func:`resolve_providers` refuses a configuration it cannot use, saying
what to set.
"""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

__all__ = ["ModelConfigError", "ProviderSettings", "Role", "resolve_providers"]

Role = Literal["picker", "naturalizer"]
_OPENAI = "https://api.openai.com/v1"


class ModelConfigError(ValueError):
    """The model configuration cannot be used; the message says what to set."""


class ProviderSettings(BaseModel):
    """One OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp, a LiteLLM proxy...)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=40, pattern=r"^[A-Za-z0-9_.-]+$")]
    """A label for events and the usage ledger."""
    base_url: Annotated[str, Field(min_length=8, max_length=500)]
    """The endpoint's base URL, ending in ``/v1`` for most servers."""
    model: Annotated[str, Field(min_length=1, max_length=200)]
    """The model name the endpoint serves."""
    api_key: SecretStr | None = None
    """The API key; local servers usually accept any value."""
    strict: bool = False
    """Send function schemas in strict mode (OpenAI structured outputs)."""
    timeout_seconds: Annotated[float, Field(gt=0, le=600)] = 30.0
    """Per-request timeout."""


def _check(provider: ProviderSettings, role: Role, source: str) -> ProviderSettings:
    parts = urlsplit(provider.base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ModelConfigError(
            f"{source}: the {role} provider {provider.name!r} has base_url {parts.scheme or 'without a scheme'}:..., "
            "but it must be an http(s) URL such as http://localhost:8000/v1"
        )
    if parts.hostname == "api.openai.com" and provider.api_key is None:
        raise ModelConfigError(
            f"{source}: the {role} provider {provider.name!r} is OpenAI and has no key: set OPENAI_API_KEY (or its api_key)"
        )
    return provider


def resolve_providers(
    role: Role,
    providers: list[ProviderSettings],
    *,
    model: str | None,
    base_url: str | None,
    api_key: SecretStr | None,
) -> list[ProviderSettings]:
    """The ordered providers for ``role``; empty means offline. Raises :class:`ModelConfigError`."""
    if providers:
        names = [p.name for p in providers]
        if len(set(names)) != len(names):
            raise ModelConfigError(f"TOLLGATE_{role.upper()}_PROVIDERS: the providers need distinct names, got {names!r}")
        return [_check(p, role, f"TOLLGATE_{role.upper()}_PROVIDERS") for p in providers]
    if model is None:
        if base_url is not None and role == "picker":
            raise ModelConfigError("OPENAI_BASE_URL is set but no model: set TOLLGATE_PICKER_MODEL")
        return []
    try:
        shorthand = ProviderSettings(name="default", base_url=base_url or _OPENAI, model=model, api_key=api_key)
    except ValidationError as exc:
        fields = sorted({str(e["loc"][0]) for e in exc.errors(include_input=False) if e.get("loc")})
        raise ModelConfigError(
            f"{role} model settings are not usable ({', '.join(fields)}): check OPENAI_BASE_URL and the model name"
        ) from None
    return [_check(shorthand, role, f"TOLLGATE_{role.upper()}_MODEL")]
