"""Authentication for ``langgraph dev`` and Studio: the same authenticator as the HTTP API.

``langgraph.json`` names :data:`auth` (``auth.path``, with ``disable_studio_auth`` so no other
scheme is let through). Every request to the local API must carry a credential Tollgate
accepts (a stored token, or an OIDC token with ``TOLLGATE_AUTH=oidc``); then

* a run takes its owner from that credential: a run whose context names another owner is
  refused (403), one that names none gets the caller's;
* threads are the caller's: created with their owner in the metadata, and read, searched,
  updated, deleted and run only by them (others' answer as missing);
* assistants (the graph's description) may be read by any authenticated caller; everything
  else (crons, the store) is refused.

``make studio-open`` serves the graph without this, for development on 127.0.0.1 only
(``langgraph-open.json``); it says so when it starts.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langgraph_sdk import Auth

from tollgate.web.identity import Authenticator, build_authenticator

__all__ = ["auth"]

auth = Auth()
"""The handlers ``langgraph.json`` names."""

_lock = asyncio.Lock()
_authenticators: list[Authenticator] = []


async def _authenticator() -> Authenticator:
    if not _authenticators:
        async with _lock:
            if not _authenticators:
                from tollgate.graph.studio.platform import services  # the graph's own services: one database pool per server

                svc = await services()
                _authenticators.append(build_authenticator(svc.settings, svc.db))
    return _authenticators[0]


@auth.authenticate
async def authenticate(headers: dict[bytes, bytes]) -> Auth.types.MinimalUserDict:
    """The caller the request's credential proves, or 401."""
    decoded = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in headers.items()}
    identity = await (await _authenticator()).authenticate(decoded)
    if identity is None:
        raise Auth.exceptions.HTTPException(status_code=401, detail="a valid bearer token is required")
    return {"identity": identity.owner_id, "permissions": sorted(identity.scopes),
            "display_name": identity.display_name or identity.owner_id}


@auth.on
async def _refuse_everything_else(ctx: Auth.types.AuthContext, value: Any) -> bool:
    return False


@auth.on.assistants.read
async def _read_assistants(ctx: Auth.types.AuthContext, value: Any) -> bool:
    return True


@auth.on.assistants.search
async def _search_assistants(ctx: Auth.types.AuthContext, value: Any) -> bool:
    return True


@auth.on.threads.create
async def _create_thread(ctx: Auth.types.AuthContext, value: Auth.types.on.threads.create.value) -> Auth.types.FilterType:
    """A new thread is the caller's; opening a thread of the HTTP API or the CLI by its id (our
    database knows its owner) is refused to anyone but that owner."""
    owner = ctx.user.identity
    thread_id = value.get("thread_id")
    if thread_id is not None:
        from tollgate.graph.studio.platform import services

        async with (await services()).db.pool.connection() as conn:
            cur = await conn.execute("SELECT owner_id FROM threads WHERE thread_id = %s", (str(thread_id),))
            row = await cur.fetchone()
        if row is not None and row["owner_id"] != owner:
            raise Auth.exceptions.HTTPException(status_code=403, detail="that thread is another owner's")
    metadata = value.setdefault("metadata", {})
    metadata["owner"] = owner
    return {"owner": owner}


@auth.on.threads
async def _own_threads(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    """Read, search, update, delete, copy: the caller's threads only."""
    return {"owner": ctx.user.identity}


@auth.on.threads.create_run
async def _run_as_the_caller(ctx: Auth.types.AuthContext, value: Auth.types.on.threads.create_run.value) -> Auth.types.FilterType:
    """A run acts for the authenticated owner; a context that names another owner is refused."""
    owner = ctx.user.identity
    kwargs = value.get("kwargs") or {}
    context = kwargs.get("context")
    if not isinstance(context, dict):
        context = kwargs["context"] = {}
    named = context.get("owner_id")
    if named not in (None, "", owner):
        raise Auth.exceptions.HTTPException(status_code=403, detail="a run acts for the authenticated owner only")
    context["owner_id"] = owner
    if not context.get("timezone") or "locale" not in context:  # the owner's profile, as on every other surface
        timezone, locale = await _profile_defaults(owner)
        context.setdefault("locale", locale)
        if not context.get("timezone"):
            context["timezone"] = timezone
    configurable = (kwargs.get("config") or {}).get("configurable")
    if isinstance(configurable, dict):  # the context as the platform mirrors it for the graph
        configurable["owner_id"] = owner
        configurable.setdefault("timezone", context["timezone"])
    return {"owner": owner}


async def _profile_defaults(owner: str) -> tuple[str, str | None]:
    """The owner's timezone (else the server's default) and locale, from their profile."""
    from tollgate.graph.profiles import get_profile
    from tollgate.graph.studio.platform import services

    svc = await services()
    profile = await get_profile(svc.db, owner)
    return profile.timezone or svc.settings.default_timezone, profile.locale
