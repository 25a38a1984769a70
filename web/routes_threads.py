"""``GET /v1/threads`` and ``GET /v1/threads/{id}``: the caller's threads, read back."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from web import store
from web.deps import PrincipalDep
from web.errors import documented
from web.schemas import THREAD_ID_PATTERN, ApprovalOut, ThreadDetail, ThreadQuery, ThreadsOut, ThreadsQuery

__all__ = ["router"]

router = APIRouter(prefix="/v1/threads", tags=["threads"])


@router.get("", summary="List the caller's threads", responses=documented(401, 422, 429, 503))
async def list_threads(
    principal: PrincipalDep,
    query: Annotated[ThreadsQuery, Query()],
) -> ThreadsOut:
    """The caller's threads of one ``kind``, most recently active first.

    ``chat`` (the default): conversations from HTTP, the CLI or Studio. ``run``: the threads of
    background runs, and ``inbox``: the owner's notices; both are written by the server only
    (a chat message there answers 409 ``thread_read_only``). ``all``: every kind.
    """
    kind = None if query.kind == "all" else query.kind
    threads = await store.list_threads(principal.app.services.db, principal.owner_id, query.limit, kind)
    return ThreadsOut(threads=threads)


@router.get("/{thread_id}", summary="Read a thread", responses=documented(401, 404, 422, 429, 503))
async def read_thread(
    thread_id: Annotated[str, Path(pattern=THREAD_ID_PATTERN)],
    principal: PrincipalDep,
    query: Annotated[ThreadQuery, Query()],
) -> ThreadDetail:
    """The thread's messages, its status and the approval it waits on."""
    db = principal.app.services.db
    thread = await store.require_thread(db, principal.owner_id, thread_id)
    waiting = await principal.app.runner.pending_approvals(principal.context, thread_id=thread_id)
    pending = ApprovalOut.of(waiting[0]) if waiting else None
    latest = await store.latest_event(db, thread_id)
    status = store.thread_status(pending=pending is not None, latest=latest)
    if principal.hub.running(thread_id):
        status = "running"
    return ThreadDetail(
        thread_id=thread.thread_id,
        status=status,
        created_at=thread.created_at,
        updated_at=thread.updated_at,
        messages=await store.transcript(db, thread_id, query.limit),
        pending_approval=pending,
        latest_turn_id=latest["turn_id"] if latest else None,
        latest_seq=latest["seq"] if latest else None,
        latest_event_id=latest["id"] if latest else None,
    )
