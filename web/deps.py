"""FastAPI dependencies as ``Annotated`` aliases: the server's state, settings, the app, the caller.

Authentication (the configured :class:`~web.identity.Authenticator`), the route group's required
scopes, the rate limit and the owner's profile live in :func:`current_principal`, so a route that
takes a :data:`PrincipalDep` can never forget any of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Final

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tollgate.graph.app import App
from tollgate.graph.ledger.audit import AuditRecord, append_audit
from tollgate.graph.profiles import get_profile, resolve
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.web.errors import InsufficientScope, RateLimited, Unauthenticated
from tollgate.web.hub import TurnHub
from tollgate.web.identity import Authenticator, Identity
from tollgate.web.ratelimit import RateLimiter

__all__ = [
    "AppDep",
    "HubDep",
    "Principal",
    "PrincipalDep",
    "ServerState",
    "ServerStateDep",
    "SettingsDep",
    "current_principal",
]


@dataclass(frozen=True, slots=True)
class ServerState:
    """What the lifespan opens: one per server process."""

    settings: Settings
    """Configuration."""
    app: App
    """The running Tollgate (services and runner)."""
    hub: TurnHub
    """Detached runs and the event log."""
    limiter: RateLimiter
    """The per-principal request budget."""
    authenticator: Authenticator
    """Who a request's credential proves (``TOLLGATE_AUTH``)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller, and the server their request reached."""

    owner_id: str
    """The owner the credential proves."""
    context: Context
    """The run context for this caller's turns (timezone from the owner's profile)."""
    identity: Identity
    """What the credential says: scopes, claimed name, timezone and locale."""
    server: ServerState
    """The server's state (its app and hub): routes that authenticate take it from here, one
    dependency fewer to resolve per request than taking it on its own."""
    display_name: str = ""
    """The owner's name: their profile's, else their credential's."""
    locale: str | None = None
    """The owner's locale: their profile's, else their credential's."""

    @property
    def app(self) -> App:
        """The running Tollgate."""
        return self.server.app

    @property
    def hub(self) -> TurnHub:
        """The turn hub."""
        return self.server.hub


# These dependencies are ``async`` although they never wait: FastAPI runs a plain ``def``
# dependency in a worker thread, a thread hop per dependency per request for an attribute read.
async def _server_state(request: Request) -> ServerState:
    state = getattr(request.app.state, "tollgate", None)
    if not isinstance(state, ServerState):
        raise RuntimeError("the Tollgate lifespan has not run")
    return state


ServerStateDep = Annotated[ServerState, Depends(_server_state)]
"""The server's state."""


async def _settings(state: ServerStateDep) -> Settings:
    return state.settings


async def _app(state: ServerStateDep) -> App:
    return state.app


async def _hub(state: ServerStateDep) -> TurnHub:
    return state.hub


SettingsDep = Annotated[Settings, Depends(_settings)]
"""The settings."""
AppDep = Annotated[App, Depends(_app)]
"""The running Tollgate."""
HubDep = Annotated[TurnHub, Depends(_hub)]
"""The turn hub."""

_bearer = HTTPBearer(auto_error=False, description="A Tollgate API token (`tg_...`); `make run` prints one.")


# Route groups, by path, for the scopes a deployment requires of each (TOLLGATE_AUTH_SCOPES).
_GROUPS: Final = (("/v1/approvals", "approvals"), ("/v1/background-runs", "background"), ("/v1/admin", "admin"),
                  ("/metrics", "admin"))


def _group(path: str) -> str:
    return next((group for prefix, group in _GROUPS if path.startswith(prefix)), "chat")


async def current_principal(
    request: Request,
    state: ServerStateDep,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],  # the scheme, for the API docs
) -> Principal:
    """Authenticate the caller, check the route group's scopes, spend one request of the owner's budget."""
    identity = await state.authenticator.authenticate(request.headers)
    if identity is None:
        raise Unauthenticated()
    owner = identity.owner_id
    group = _group(request.url.path)
    required = state.settings.auth_scopes.get(group, [])  # type: ignore[call-overload]
    if group == "admin":
        # Operators' routes fail closed: only a credential that names the configured admin
        # scopes itself (a provider's token) passes; a stored token is one owner's, never an operator's.
        if not required or not set(required) <= identity.scopes:
            raise InsufficientScope(required or ["(set TOLLGATE_AUTH_SCOPES admin)"])
    elif required and not identity.grants(required):
        raise InsufficientScope(required)
    refused = state.limiter.take(owner)
    if refused is not None:
        if refused.first:
            # One record per run of refusals: a client hammering a spent budget must not turn
            # each refused request into a database write.
            record = AuditRecord(owner_id=owner, stage="http", decision="refuse", reason="rate_limited",
                                 code="rate_limited", thread_id="", turn_id="")
            await append_audit(state.app.services.db.pool, record, now=state.app.services.clock())
        raise RateLimited(refused.retry_after)
    profile = await get_profile(state.app.services.db, owner)
    zone, locale, name = resolve(profile, claimed_timezone=identity.timezone, claimed_locale=identity.locale,
                                 claimed_name=identity.display_name, default_timezone=state.settings.default_timezone)
    context = Context(owner_id=owner, timezone=zone, channel="chat", locale=locale)
    return Principal(owner_id=owner, context=context, identity=identity, display_name=name, locale=locale,
                     server=state)


PrincipalDep = Annotated[Principal, Depends(current_principal)]
"""The authenticated, rate-limited caller."""
