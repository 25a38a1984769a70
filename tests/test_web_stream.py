"""A run's own SSE stream: its headers, its events, and keep-alives while the run is quiet."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from graph.db import Database
from graph.events import TurnEvent
from tests.server_harness import Api
from web.hub import LiveRun, TurnHub
from web.sse import RunStream, sse_message, to_sse
from web.store import event_json


def _event(seq: int, kind: str) -> TurnEvent:
    return TurnEvent(type=kind, seq=seq, turn_id="turn-1", ts="2026-11-30T00:00:00+00:00", thread_id="t-quiet",
                     data={"text": "ok", "outcome": "read"} if kind == "message_complete" else {})  # type: ignore[typeddict-item]


async def test_a_quiet_run_is_followed_by_keep_alives_then_by_its_events(db: Database) -> None:
    hub = TurnHub(db, idle_seconds=5)
    run = LiveRun(thread_id="t-quiet", first=asyncio.get_running_loop().create_future())
    batches = hub.follow_run(run, "turn-1", 0, quiet_seconds=0.05)
    assert await anext(batches) == []  # nothing recorded for 0.05 s: a keep-alive
    last = _event(1, "message_complete")
    hub._recorded(run, [last])
    assert await anext(batches) == [last]
    with pytest.raises(StopAsyncIteration):  # the run's last event ends its stream
        await anext(batches)


async def _served(*batches: list[TurnEvent], gone_after: int | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The ASGI messages a :class:`RunStream` of ``batches`` sends, and what its source saw.

    The client disconnects once ``gone_after`` batches were sent (never, with ``None``).
    """
    seen: list[str] = []
    sent: list[dict[str, Any]] = []
    disconnected = asyncio.Event()

    async def source() -> Any:
        try:
            for batch in batches:
                yield batch
                await asyncio.sleep(0)  # as a real run does between events
            seen.append("exhausted")
        finally:
            seen.append("closed")

    async def send(message: Any) -> None:
        sent.append(message)
        if gone_after is not None and len(sent) - 1 >= gone_after:
            disconnected.set()

    async def receive() -> Any:
        if gone_after == 0:
            disconnected.set()
        await disconnected.wait()
        return {"type": "http.disconnect"}

    await RunStream(source())({"type": "http"}, receive, send)
    return sent, seen


async def test_a_run_stream_writes_each_batch_once_and_a_keep_alive_as_a_comment() -> None:
    sent, _ = await _served([_event(1, "tool_start")], [], [_event(2, "tool_end"), _event(3, "message_complete")])
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    headers = dict(sent[0]["headers"])
    assert headers[b"content-type"] == b"text/event-stream; charset=utf-8"
    assert headers[b"cache-control"] == b"no-store" and headers[b"x-accel-buffering"] == b"no"
    assert b"content-length" not in headers
    bodies = [m["body"] for m in sent[1:]]
    assert bodies[0].startswith(b"id: 1\r\nevent: tool_start\r\ndata: ") and bodies[0].count(b"event:") == 1
    assert bodies[1] == b": ping\r\n\r\n"
    assert bodies[2].count(b"event:") == 2  # recorded together, written together
    assert [m["more_body"] for m in sent[1:]] == [True, True, False]  # the last event's write ends the response


async def test_a_run_stream_that_ends_without_a_last_event_still_ends_the_response() -> None:
    sent, _ = await _served([_event(1, "tool_start")])  # the database failed before the run's last event was recorded
    assert [(m["body"], m["more_body"]) for m in sent[1:]] == [(sent[1]["body"], True), (b"", False)]


async def test_a_run_stream_stops_following_once_the_client_is_gone() -> None:
    events = [[_event(1, "tool_start")], [_event(2, "tool_end")], [_event(3, "message_complete")]]
    sent, seen = await _served(*events, gone_after=1)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]  # nothing after it left
    assert seen == ["closed"]  # the follow was closed early (the run itself goes on, detached)
    sent, seen = await _served(*events)
    assert len(sent) == 4 and seen == ["closed"]  # the last event ended the response, then the follow


async def test_a_chat_stream_is_served_as_server_sent_events(api: Api) -> None:
    out = await api.chat("what's on my calendar today?")
    assert out.status == 200 and out.content_type == "text/event-stream; charset=utf-8"
    assert out.types[-1] == "message_complete" and out.ids == [str(e["seq"]) for e in out.events]


@pytest.mark.parametrize("event", [
    _event(1, "tool_start"),
    _event(7, "message_complete"),
    TurnEvent(type="tool_end", seq=12, turn_id="turn-1", ts="2026-11-30T00:00:00+00:00", thread_id="t-quiet",
              data={"summary": "two lines\r\nand a tab\t, quotes \" and é", "n": 2**70, "ok": True, "none": None}),
])
def test_a_run_stream_writes_each_event_as_sse_starlette_encodes_it(event: TurnEvent) -> None:
    message = sse_message(event)
    assert message == to_sse(event).encode()
    assert message.count(b"\n") == 4  # id, event, one data line, the blank line that ends it
    data = message.split(b"\r\n")[2].removeprefix(b"data: ")
    assert json.loads(data) == event  # big integers, line breaks and non-ASCII text included


def test_an_event_is_logged_and_streamed_as_compact_json_of_what_it_holds() -> None:
    event = TurnEvent(type="tool_end", seq=3, turn_id="turn-1", ts="2026-11-30T00:00:00+00:00",
                      data={"when": datetime(2026, 11, 30, tzinfo=UTC), 1: "key"})  # type: ignore[dict-item]
    text = event_json(event)
    assert " " not in text.split('"data"')[0]  # compact
    assert json.loads(text)["data"] == {"when": "2026-11-30T00:00:00+00:00", "1": "key"}
    assert json.loads(event_json(TurnEvent(type="tool_end", seq=4, turn_id="t", ts="", data={"n": -(2**80)})))["data"] == {
        "n": -(2**80)}  # beyond orjson's 64 bits: the standard library encodes it
