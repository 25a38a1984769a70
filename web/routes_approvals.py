"""``GET /v1/approvals`` and ``POST /v1/approvals/{id}/decision``: the approval API."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import JSONResponse, Response

from tollgate.graph.background.api import decide_background
from tollgate.web import store
from tollgate.web.deps import PrincipalDep
from tollgate.web.errors import documented
from tollgate.web.routes_chat import STREAM_RESPONSE
from tollgate.web.schemas import APPROVAL_ID_PATTERN, ApprovalOut, ApprovalsOut, DecisionRequest, runner_decision
from tollgate.web.sse import respond_to_run

__all__ = ["router"]

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])


@router.get("", summary="List the caller's pending approvals", responses=documented(401, 429, 503))
async def list_approvals(principal: PrincipalDep) -> ApprovalsOut:
    """Pending approvals of every thread of the caller, newest first."""
    pending = await principal.app.runner.pending_approvals(principal.context)
    return ApprovalsOut(approvals=[ApprovalOut.of(p) for p in pending])


@router.post(
    "/{approval_id}/decision",
    summary="Approve, edit or reject; stream the resumed turn",
    response_class=Response,
    responses=STREAM_RESPONSE | documented(401, 404, 409, 422, 429, 503),
)
async def decide(
    approval_id: Annotated[str, Path(pattern=APPROVAL_ID_PATTERN)],
    body: DecisionRequest,
    principal: PrincipalDep,
    request: Request,
) -> Response:
    """Decide a pending approval and resume its turn; the events continue the turn's sequence.

    A request of several actions takes ``{"decisions": [...]}``, one per action in order (the id
    may be the request's or any of its actions'). An approval runs once: deciding one that is no
    longer pending (decided, superseded by a newer message) answers 409 and nothing runs, and so
    does a wrong count or a decision the action does not allow (the request stays pending). An
    edit goes through every check again and comes back as a new approval with its own preview,
    unless it asks to ``run``.
    """
    approval = await store.require_approval(principal.app.services.db, principal.owner_id, approval_id)
    decision = runner_decision(body, list(approval.names) or [f"{approval.tool}__{approval.action}"])
    if approval.thread_id.startswith("bg:"):
        # A background run's approval: a worker continues the run; 202 with the run id.
        run_id = await decide_background(principal.app, principal.context, approval.request_id or approval_id, decision)
        return JSONResponse({"run_id": run_id, "status": "queued"}, status_code=202)
    run, first = await principal.hub.start(
        principal.owner_id, approval.thread_id, principal.app.runner.stream_decision(principal.context, approval_id, decision)
    )
    return await respond_to_run(request, principal.hub, run, first)
