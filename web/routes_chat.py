"""``POST /v1/chat`` (a turn, streamed) and ``GET /v1/threads/{id}/events`` (resume a stream)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request
from starlette.responses import Response

from tollgate.graph.threads import thread_kind
from tollgate.policies.errors import NotFound, ThreadReadOnly
from tollgate.web import store
from tollgate.web.deps import PrincipalDep
from tollgate.web.errors import documented
from tollgate.web.schemas import SSE_MESSAGE_SCHEMA, THREAD_ID_PATTERN, ChatRequest, EventsQuery, TurnResult
from tollgate.web.sse import event_stream, respond_to_run

__all__ = ["STREAM_RESPONSE", "router"]

router = APIRouter(prefix="/v1", tags=["chat"])

STREAM_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "model": TurnResult,
        "description": (
            "`text/event-stream` (the default): one SSE message per turn event, `id` = the event's "
            "id in the event log (global and increasing), `event` = its `type`, `data` = the event as "
            "JSON (see `EventOut`); the run ends "
            "with `message_complete` or `approval_required`. A run that fails mid-stream ends with "
            "an `error` message without an id. `application/json` (when `Accept` asks for it and "
            "not for `text/event-stream`): the whole run as one `TurnResult`."
        ),
        "content": {"text/event-stream": {"schema": SSE_MESSAGE_SCHEMA}},
    }
}
"""The documented 200 of every route that runs a turn."""


_REPLAY_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": (
            "SSE as in `POST /v1/chat`: the thread's recorded events with an `id` greater than "
            "`Last-Event-ID`, whatever turn they belong to (without it: the latest turn's, from its "
            "first event). A finished run's stream ends after the replay; a run in flight is "
            "followed until its `message_complete` or `approval_required`."
        ),
        "content": {"text/event-stream": {"schema": SSE_MESSAGE_SCHEMA}},
    }
}


@router.post(
    "/chat",
    summary="Send a message; stream the turn's events",
    response_class=Response,
    responses=STREAM_RESPONSE | documented(401, 404, 409, 422, 429, 503),
)
async def chat(body: ChatRequest, principal: PrincipalDep, request: Request) -> Response:
    """Run a turn with the user's message on a new thread (no ``thread_id``) or one of the caller's.

    A message on a thread waiting for approval supersedes it: that approval can no longer run,
    and the reply says so. Two requests on one thread run one after the other. A background
    run's thread or the inbox is read-only for chat: 409 ``thread_read_only``.
    """
    db = principal.app.services.db
    if body.thread_id is None:
        thread_id = await store.create_thread(db, principal.owner_id, body.message)
        principal.hub.owned.remember(principal.owner_id, thread_id)
    else:
        thread_id = body.thread_id
        await principal.hub.owned.require(db, principal.owner_id, thread_id)
        kind = thread_kind(thread_id)
        if kind != "chat":
            raise ThreadReadOnly(thread_id, kind)
        await store.title_thread(db, principal.owner_id, thread_id, body.message)
    run, first = await principal.hub.start(
        principal.owner_id, thread_id, principal.app.runner.stream(principal.context, thread_id, body.message)
    )
    return await respond_to_run(request, principal.hub, run, first)


@router.get(
    "/threads/{thread_id}/events",
    summary="Replay a turn's events after Last-Event-ID, then follow it live",
    response_class=Response,
    responses=_REPLAY_RESPONSE | documented(401, 404, 422, 429, 503),
)
async def thread_events(
    thread_id: Annotated[str, Path(pattern=THREAD_ID_PATTERN)],
    principal: PrincipalDep,
    query: Annotated[EventsQuery, Query()],
    last_event_id: Annotated[
        int, Header(alias="Last-Event-ID", ge=0, le=2**62, description="The `id` of the last event received.")
    ] = 0,
) -> Response:
    """Resume a stream: what a client missed of the thread, for a run in flight or finished."""
    db = principal.app.services.db
    await store.require_thread(db, principal.owner_id, thread_id)
    turn_id = query.turn_id or None
    after = last_event_id
    if not after:
        latest = await store.latest_event(db, thread_id, turn_id)
        if latest is None:
            raise NotFound("turn", query.turn_id or thread_id)
        after = await store.first_event_id(db, thread_id, latest["turn_id"])
    return event_stream(principal.hub.follow(thread_id, after, turn_id=turn_id))
