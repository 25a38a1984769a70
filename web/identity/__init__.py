"""Who is calling: an :class:`Authenticator` turns a request's headers into an :class:`Identity`.

Every HTTP route and stream authenticates through the one the settings choose
(:func:`build_authenticator`): Tollgate's own stored bearer tokens (``TOLLGATE_AUTH=tokens``,
the default) or an OpenID Connect provider's signed JWTs (``oidc``). An authenticator never
raises for a bad credential: it answers ``None``, and the caller answers 401 without saying
which check failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database

__all__ = ["Authenticator", "Identity", "bearer_token", "build_authenticator"]


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated caller."""

    owner_id: str
    """The owner whose data the caller may act on (never taken from anything the model says)."""
    display_name: str = ""
    """A name to show, when the credential carries one."""
    scopes: frozenset[str] = field(default_factory=frozenset)
    """What the credential grants (OIDC ``scope``/``scp``); stored tokens grant every route."""
    all_scopes: bool = False
    """Whether the credential grants every scope (stored tokens: they are per owner, not per route)."""
    timezone: str | None = None
    """The credential's ``zoneinfo`` claim, a default for the owner's profile."""
    locale: str | None = None
    """The credential's ``locale`` claim, a default for the owner's profile."""

    def grants(self, required: list[str]) -> bool:
        """Whether every one of ``required`` is granted."""
        return self.all_scopes or set(required) <= self.scopes


class Authenticator(Protocol):
    """Request headers in, an identity out (``None``: not authenticated)."""

    async def authenticate(self, headers: Mapping[str, str]) -> Identity | None:
        """The caller these headers prove, or ``None``."""
        ...

    async def aclose(self) -> None:
        """Release what it holds (connections, caches)."""
        ...


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The credential of an ``Authorization: Bearer ...`` header (case-insensitive scheme), or of an
    ``X-Api-Key`` header (what the LangGraph SDKs and agent UIs send); ``None`` when there is none,
    or when both are given and differ (which one was meant cannot be known)."""
    value = headers.get("authorization") or headers.get("Authorization") or ""
    scheme, _, token = value.strip().partition(" ")
    bearer = token.strip() if scheme.lower() == "bearer" else ""
    key = (headers.get("x-api-key") or headers.get("X-Api-Key") or "").strip()
    if bearer and key and bearer != key:
        return None
    return bearer or key or None


def build_authenticator(settings: Settings, db: Database) -> Authenticator:
    """The authenticator ``settings.auth`` names, over ``db`` (stored tokens) or the provider (OIDC)."""
    if settings.auth == "oidc":
        from tollgate.web.identity.oidc import OidcAuthenticator

        return OidcAuthenticator.from_settings(settings)
    from tollgate.web.identity.tokens import StoredTokens

    return StoredTokens(db)
