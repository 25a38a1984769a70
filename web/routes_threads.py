"""The caller's threads: list and search, read, rename, delete (softly), and stop a running turn."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from tollgate.graph.threads import thread_kind
from tollgate.web import store
from tollgate.web.deps import PrincipalDep
from tollgate.web.errors import documented
from tollgate.web.schemas import (
    THREAD_ID_PATTERN,
    ApprovalOut,
    StopOut,
    ThreadDetail,
    ThreadPatch,
    ThreadQuery,
    ThreadsOut,
    ThreadsQuery,
    ThreadSummary,
)

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
    threads = await store.list_threads(principal.app.services.db, principal.owner_id, query.limit, kind, query.q.strip())
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
        title=thread.title,
        kind=thread_kind(thread.thread_id),
        status=status,
        created_at=thread.created_at,
        updated_at=thread.updated_at,
        messages=await store.transcript(db, thread_id, query.limit),
        pending_approval=pending,
        approvals=await store.approval_history(db, principal.owner_id, thread_id),
        latest_turn_id=latest["turn_id"] if latest else None,
        latest_seq=latest["seq"] if latest else None,
        latest_event_id=latest["id"] if latest else None,
    )


@router.patch("/{thread_id}", summary="Rename a thread", responses=documented(401, 404, 422, 429, 503))
async def rename_thread(
    thread_id: Annotated[str, Path(pattern=THREAD_ID_PATTERN)], body: ThreadPatch, principal: PrincipalDep
) -> ThreadSummary:
    """Give the thread a title (an empty one gives it back its first message)."""
    db = principal.app.services.db
    await store.rename_thread(db, principal.owner_id, thread_id, body.title)
    [summary] = await store.list_threads(db, principal.owner_id, 1, None, only=thread_id)
    return summary


@router.delete("/{thread_id}", summary="Delete a thread", status_code=204, response_class=Response,
               responses=documented(401, 404, 422, 429, 503))
async def delete_thread(thread_id: Annotated[str, Path(pattern=THREAD_ID_PATTERN)], principal: PrincipalDep) -> Response:
    """Hide the thread from the caller's lists and reads, and supersede what it waits on (nothing of it
    can run any more). Soft: its audit trail stays."""
    db = principal.app.services.db
    await store.require_thread(db, principal.owner_id, thread_id)  # before anything: another owner's stops nothing
    await principal.hub.request_stop(thread_id, answer=False)
    await store.delete_thread(db, principal.owner_id, thread_id)
    principal.hub.owned.forget(principal.owner_id, thread_id)
    return Response(status_code=204)


@router.post("/{thread_id}/stop", summary="Stop the thread's running turn", responses=documented(401, 404, 422, 429, 503))
async def stop_turn(thread_id: Annotated[str, Path(pattern=THREAD_ID_PATTERN)], principal: PrincipalDep) -> StopOut:
    """Cancel the turn running on the thread, as a client that goes away would, in whichever server
    process runs it.

    Its stream ends with an ``error`` event of code ``cancelled``. What had already run stays done;
    a write is either committed or not run, never half; the thread is free at once.
    """
    await store.require_thread(principal.app.services.db, principal.owner_id, thread_id)
    return StopOut(stopped=await principal.hub.request_stop(thread_id))
