"""Turn events on the wire: Server-Sent Events (sse-starlette), or one JSON result on request.

Each event is sent as ``id: <its id in the event log>``, ``event: <type>``, ``data: <the event as
JSON>``. The id is global and increasing, so a client that reconnects with ``Last-Event-ID``
resumes exactly after the last event it saw, whatever turn that was in. A run that fails after
it started streaming ends with an ``error`` event whose data says ``fatal: true``. A
disconnect never stops the turn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import Response

from tollgate.graph.events import TurnEvent
from tollgate.policies.errors import TollgateError, Unavailable
from tollgate.web.hub import LiveRun, TurnHub
from tollgate.web.schemas import ApprovalOut, EventOut, TurnResult
from tollgate.web.store import event_json

__all__ = ["PING_SECONDS", "event_stream", "respond_to_run", "to_sse", "wants_json"]

PING_SECONDS = 15
"""Keep-alive comment interval, so proxies keep an idle stream open."""


def to_sse(event: TurnEvent) -> ServerSentEvent:
    """One SSE message: ``id`` is the event's log id, ``event`` its type, ``data`` the event as JSON."""
    return ServerSentEvent(event_json(event), event=event["type"], id=str(event["id"]))


def event_stream(items: AsyncIterator[TurnEvent]) -> EventSourceResponse:
    """The SSE response for a stream of recorded events."""

    async def messages() -> AsyncIterator[ServerSentEvent]:
        async for item in items:
            yield to_sse(item)

    return EventSourceResponse(messages(), ping=PING_SECONDS, headers={"Cache-Control": "no-store"})


def wants_json(request: Request) -> bool:
    """Whether the client asked for one JSON result rather than a stream (SSE is the default)."""
    accept = request.headers.get("accept", "").lower()
    return "application/json" in accept and "text/event-stream" not in accept


async def _result(hub: TurnHub, run: LiveRun, first: TurnEvent) -> TurnResult:
    events: list[EventOut] = []
    reply: str | None = None
    outcome: str | None = None
    approval: ApprovalOut | None = None
    async for item in hub.follow_run(run, first["id"] - 1):
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
                actions=data.get("actions") or [],
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
    return event_stream(hub.follow_run(run, first["id"] - 1))
