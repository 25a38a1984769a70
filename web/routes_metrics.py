"""``GET /metrics``: the process's Prometheus metrics, for a credential with the admin scope.

It is in the admin route group (``web.deps``): without ``admin`` in ``TOLLGATE_AUTH_SCOPES`` it is
refused like every operator's route. A scraper that cannot present a token reads the same
metrics on ``TOLLGATE_METRICS_PORT`` instead (bound to ``TOLLGATE_METRICS_HOST``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import start_http_server

from tollgate.graph.observe import metrics
from tollgate.web.deps import PrincipalDep
from tollgate.web.errors import documented

__all__ = ["router", "serve_port"]

router = APIRouter(tags=["admin"])


@router.get(
    "/metrics", summary="Prometheus metrics", response_class=Response,
    responses={200: {"content": {metrics.CONTENT_TYPE: {"schema": {"type": "string"}}},
                     "description": "The metrics in Prometheus' text format."}, **documented(401, 403, 429)},
)
async def scrape(principal: PrincipalDep) -> Response:
    """Turns by outcome, approvals and background runs by state, the job queue, model and tool
    latency, model errors, pool connections and lease waits (``graph/observe/metrics.py``)."""
    await metrics.refresh(principal.app.services.db.pool)
    return Response(metrics.exposition(), media_type=metrics.CONTENT_TYPE)



async def serve_port(pool: Any, host: str, port: int, *, refresh_seconds: float) -> None:
    """Serve the metrics without authentication on ``host:port`` until cancelled (bind it where
    only the scraper reaches), reading the database gauges every ``refresh_seconds``.

    prometheus-client's own threaded server: a second uvicorn in the process would fight the
    first over the signal handlers. Its scrapes cannot wait on the database, hence the refresh.
    """
    server, thread = start_http_server(port, addr=host, registry=metrics.REGISTRY)
    try:
        while True:
            await metrics.refresh(pool)
            await asyncio.sleep(refresh_seconds)
    finally:
        server.shutdown()
        thread.join(timeout=5)
