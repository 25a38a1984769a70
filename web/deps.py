"""FastAPI dependencies as ``Annotated`` aliases: the server's state, settings, the app, the caller.

Authentication and the rate limit live in :func:`current_principal`, so a route that takes a
:data:`PrincipalDep` can never forget either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from graph.app import App
from graph.settings import Settings
from graph.state import Context
from web.auth import owner_of_token
from graph.audit import AuditRecord, append_audit
from web.errors import RateLimited, Unauthenticated
from web.hub import TurnHub
from web.ratelimit import RateLimiter

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


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller, and the server their request reached."""

    owner_id: str
    """The owner the bearer token maps to."""
    context: Context
    """The run context for this caller's turns."""
    server: ServerState
    """The server's state (its app and hub): routes that authenticate take it from here, one
    dependency fewer to resolve per request than taking it on its own."""

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


async def current_principal(
    state: ServerStateDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """Authenticate the bearer token, then spend one request of the owner's budget."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthenticated()
    token = credentials.credentials
    owner = await owner_of_token(state.app.services.db, token)
    if owner is None:
        raise Unauthenticated()
    refused = state.limiter.take(owner)
    if refused is not None:
        if refused.first:
            # One record per run of refusals: a client hammering a spent budget must not turn
            # each refused request into a database write.
            record = AuditRecord(owner_id=owner, stage="http", decision="refuse", reason="rate_limited",
                                 code="rate_limited", thread_id="", turn_id="")
            await append_audit(state.app.services.db.pool, record, now=state.app.services.clock())
        raise RateLimited(refused.retry_after)
    context = Context(owner_id=owner, timezone=state.settings.default_timezone, channel="chat")
    return Principal(owner_id=owner, context=context, server=state)


PrincipalDep = Annotated[Principal, Depends(current_principal)]
"""The authenticated, rate-limited caller."""
