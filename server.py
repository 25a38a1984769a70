"""Tollgate's HTTP server: the FastAPI app, assembled from ``web/`` (``tollgate serve`` runs it).

Under plain uvicorn, ``uvicorn server:app`` serves it as ``tollgate serve`` does.

Nothing happens at import. The lifespan reads the settings, opens the database (migrated),
the checkpointer, the graph and the runner (:func:`graph.app.open_app`), and the turn hub;
routes reach them through the dependencies in :mod:`web.deps`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

import tollgate.graph._env  # noqa: F401  - strict msgpack and no telemetry before langgraph loads
from tollgate.graph.app import App, open_app
from tollgate.graph.settings import Settings
from tollgate.web import (
    routes_admin, routes_approvals, routes_background, routes_chat, routes_health, routes_me, routes_metrics, routes_page,
    routes_threads,
)
from tollgate.web.deps import ServerState
from tollgate.web.errors import install_error_handlers
from tollgate.web.hub import TurnHub
from tollgate.web.identity import build_authenticator
from tollgate.web.limits import RequestLimits
from tollgate.web.ratelimit import RateLimiter

__all__ = ["app", "create_app"]

_DESCRIPTION = """\
A governed tool-calling runtime: the model chooses tool calls, the server decides what runs.

Authenticate with `Authorization: Bearer <token>` (`make run` prints a demo token). Every
route except `/healthz` and `/readyz` answers 401 without one, and one owner never sees
another's threads or approvals (404). Each caller has a request budget (429, `Retry-After`).
"""


def create_app(settings: Settings | None = None, *, tollgate: App | None = None, **app_options: Any) -> FastAPI:
    """The FastAPI app; ``settings`` default to the environment.

    The lifespan opens the app (``app_options`` go to ``open_app``), unless an open one is given
    as ``tollgate`` (``tollgate serve`` opens it first, so a configuration error is reported
    before the server starts, and shares it with its in-process worker).
    """

    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        config = settings or Settings()
        async with AsyncExitStack() as stack:
            opened = tollgate or await stack.enter_async_context(open_app(config, **app_options))
            hub = TurnHub(opened.services.db, idle_seconds=config.stream_idle_seconds)
            await hub.open()
            limiter = RateLimiter(config.rate_limit_burst, config.rate_limit_per_minute)
            authenticator = build_authenticator(config, opened.services.db)
            stack.push_async_callback(authenticator.aclose)
            api.state.tollgate = ServerState(settings=config, app=opened, hub=hub, limiter=limiter,
                                             authenticator=authenticator)
            try:
                yield
            finally:
                await hub.close()

    # /docs from vendored Swagger UI files (web/static/vendor), never a CDN: it works offline.
    # FastAPI's own request spans join Tollgate's (graph/observe/tracing.py) when traces are
    # exported; its exception log records are off, since they carry the request's input values.
    api = FastAPI(title="Tollgate", version="0.1.0", description=_DESCRIPTION, lifespan=lifespan,
                  docs_url=None, redoc_url=None, telemetry={"logs": False})

    @api.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=api.openapi_url or "/openapi.json", title="Tollgate API",
            swagger_js_url="/static/vendor/swagger-ui-bundle.js", swagger_css_url="/static/vendor/swagger-ui.css",
            swagger_favicon_url="/static/favicon.svg",
        )

    install_error_handlers(api)
    limits = settings or Settings()
    api.add_middleware(RequestLimits, max_header_bytes=limits.max_header_bytes, max_body_bytes=limits.max_body_bytes,
                       body_seconds=limits.body_read_seconds)
    for module in (routes_chat, routes_threads, routes_approvals, routes_background, routes_me, routes_admin,
                   routes_metrics, routes_health, routes_page):
        api.include_router(module.router)
    api.mount("/static", StaticFiles(directory=routes_page.STATIC_DIR), name="static")
    return api


app = create_app()
"""The app ``uvicorn server:app`` serves."""
