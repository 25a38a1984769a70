"""``/v1/admin``: operators' routes, served only to a credential carrying the configured admin scopes.

The admin route group fails closed (``web.deps.current_principal``): without ``admin`` in
``TOLLGATE_AUTH_SCOPES`` every route here is refused, and a stored bearer token (one owner's)
never passes; a provider's token must name the scopes itself.
"""

from __future__ import annotations

from fastapi import APIRouter

from tollgate.graph.ledger.audit import verify_chain
from tollgate.web.deps import PrincipalDep
from tollgate.web.errors import documented
from tollgate.web.schemas import AuditVerdictOut

__all__ = ["router"]

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.get("/audit", summary="Verify the audit log", responses=documented(401, 403, 429, 503))
async def verify_audit(principal: PrincipalDep) -> AuditVerdictOut:
    """Recompute the audit log's hash chain from its first row: whether every row is as it was
    written, how many were checked, and the first one that is not (a gap, an edit, a reorder)."""
    async with principal.app.services.db.pool.connection() as conn:
        verdict = await verify_chain(conn)
    return AuditVerdictOut(ok=verdict.ok, rows=verdict.rows, first_bad_seq=verdict.first_bad_seq,
                           problem=verdict.problem)
