"""``GET /healthz`` (the process serves) and ``GET /readyz`` (and its database answers); no auth."""

from __future__ import annotations

from fastapi import APIRouter

from tollgate.policies.errors import Unavailable
from tollgate.web.deps import AppDep
from tollgate.web.errors import documented
from tollgate.web.schemas import HealthOut

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness")
async def healthz() -> HealthOut:
    """Always ``ok`` while the process serves requests."""
    return HealthOut(status="ok")


@router.get("/readyz", summary="Readiness", responses=documented(503))
async def readyz(app: AppDep) -> HealthOut:
    """``ready`` when the database answers; 503 otherwise."""
    try:
        async with app.services.db.pool.connection(timeout=5) as conn:
            await conn.execute("SELECT 1")
    except Exception:
        raise Unavailable("database") from None
    return HealthOut(status="ready")
