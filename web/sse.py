"""Turn events on the wire: Server-Sent Events (sse-starlette), or one JSON result on request.

Each event is sent as ``id: <seq>``, ``event: <type>``, ``data: <the event as JSON>``. A run
that fails after it started streaming ends with an ``error`` event whose data says
``fatal: true``. Replays and follows go through sse-starlette (keep-alive pings, client
disconnects); a run's own stream through :class:`RunStream`. A disconnect never stops the turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing

from fastapi import Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from graph.events import TurnEvent
from policies.errors import TollgateError, Unavailable
from web.hub import LiveRun, TurnHub
from web.schemas import ApprovalOut, EventOut, TurnResult
from web.store import ends_run, event_json

__all__ = ["PING_SECONDS", "RunStream", "event_stream", "respond_to_run", "sse_message", "to_sse", "wants_json"]

PING_SECONDS = 15
"""Keep-alive comment interval, so proxies keep an idle stream open."""
_KEEP_ALIVE = b": ping\r\n\r\n"


def to_sse(event: TurnEvent) -> ServerSentEvent:
    """One SSE message: ``id`` is the event's seq, ``event`` its type, ``data`` the event as JSON."""
    return ServerSentEvent(event_json(event), event=event["type"], id=str(event["seq"]))


def sse_message(event: TurnEvent) -> bytes:
    """:func:`to_sse`, encoded, without building the message object (a run's own stream, per event).

    The same bytes sse-starlette writes: compact JSON has no line breaks (they are escaped in
    strings), so the data is one ``data:`` line; an event's type and seq have none either.
    """
    return b"id: %d\r\nevent: %s\r\ndata: %s\r\n\r\n" % (
        event["seq"], event["type"].encode(), event_json(event).encode()
    )


def event_stream(items: AsyncIterator[TurnEvent]) -> EventSourceResponse:
    """The SSE response for a follower."""

    async def messages() -> AsyncIterator[ServerSentEvent]:
        async for item in items:
            yield to_sse(item)

    return EventSourceResponse(messages(), ping=PING_SECONDS, headers={"Cache-Control": "no-store"})


class RunStream(Response):
    """A run's own event stream: SSE written straight to the ASGI ``send``.

    Not sse-starlette (the replay and follow streams use it): its response runs a task group of
    four tasks and a cancel scope per write, about 0.4 ms of server CPU per turn (P3 of
    ``python -m bench``), and a run's own stream needs none of it. The run's last event ends it
    (``message_complete``, ``approval_required`` or a fatal ``error``); an empty batch (after
    :data:`PING_SECONDS` without events) is sent as a keep-alive comment, as sse-starlette pings;
    and a client that went away is noticed at the next event or keep-alive: the stream stops
    following (the run goes on; its events are in the log for a reconnect).
    """

    media_type = "text/event-stream"

    def __init__(self, batches: AsyncIterator[list[TurnEvent]]) -> None:
        self.batches = batches
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-store", "Connection": "keep-alive", "X-Accel-Buffering": "no"})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        gone = asyncio.ensure_future(_client_gone(receive))  # one task, not one per write
        try:
            async with aclosing(self.batches) as batches:
                async for batch in batches:
                    if gone.done():
                        return
                    body = b"".join(sse_message(item) for item in batch) if batch else _KEEP_ALIVE
                    last = bool(batch) and ends_run(batch[-1])  # the response ends with it: one write fewer
                    await send({"type": "http.response.body", "body": body, "more_body": not last})
                    if last:
                        return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            gone.cancel()
            if gone.done() and not gone.cancelled():
                gone.exception()  # a receive that failed also means the client is gone; seen here


async def _client_gone(receive: Receive) -> None:
    """Return once the client disconnects (the request body was read before the response started)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def wants_json(request: Request) -> bool:
    """Whether the client asked for one JSON result rather than a stream (SSE is the default)."""
    accept = request.headers.get("accept", "").lower()
    return "application/json" in accept and "text/event-stream" not in accept


async def _result(hub: TurnHub, run: LiveRun, first: TurnEvent) -> TurnResult:
    events: list[EventOut] = []
    reply: str | None = None
    outcome: str | None = None
    approval: ApprovalOut | None = None
    async for item in hub.follow(run.thread_id, first["turn_id"], first["seq"] - 1, run=run):
        if item["type"] == "error" and item["data"].get("fatal") is True:
            raise run.error if isinstance(run.error, TollgateError) else Unavailable("the turn")
        events.append(EventOut.model_validate(item))
        data = item["data"]
        if item["type"] == "message_complete":
            reply, outcome = str(data["text"]), str(data["outcome"])
        elif item["type"] == "approval_required":
            outcome = "proposed"
            approval = ApprovalOut(
                approval_id=data["approval_id"], thread_id=run.thread_id, tool=data["tool"], action=data["action"],
                preview=data["preview"], args=data["args"], expires_at=data["expires_at"],
            )
    return TurnResult(
        thread_id=run.thread_id, turn_id=first["turn_id"], outcome=outcome, reply=reply, approval=approval,
        events=events,
    )


async def respond_to_run(request: Request, hub: TurnHub, run: LiveRun, first: TurnEvent) -> Response:
    """Stream the run's events (from its first), or wait and return them as one JSON result."""
    if wants_json(request):
        result = await _result(hub, run, first)
        return JSONResponse(result.model_dump(mode="json"))
    return RunStream(hub.follow_run(run, first["turn_id"], first["seq"] - 1, quiet_seconds=PING_SECONDS))
