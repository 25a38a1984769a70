"""A run's own SSE stream: server-sent events whose ids are the event log's global ids."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from tollgate.graph.events import TurnEvent
from tests.server_harness import Api
from tollgate.web.sse import to_sse
from tollgate.web.store import event_json


async def test_a_chat_stream_is_served_as_server_sent_events(api: Api) -> None:
    out = await api.chat("what's on my calendar today?")
    assert out.status == 200 and out.content_type == "text/event-stream; charset=utf-8"
    assert out.types[-1] == "message_complete" and out.ids == [str(e["id"]) for e in out.events]
    ids = [int(i) for i in out.ids]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)  # the log's ids: increasing, never reused
    again = await api.chat("and tomorrow?", thread_id=out.events[0]["thread_id"])
    assert int(again.ids[0]) > ids[-1]  # a new turn goes on from the last id, it does not restart at 1


def test_an_event_is_logged_and_streamed_as_compact_json_of_what_it_holds() -> None:
    event = TurnEvent(type="tool_end", seq=3, turn_id="turn-1", ts="2026-11-30T00:00:00+00:00",
                      data={"when": datetime(2026, 11, 30, tzinfo=UTC), 1: "key"})  # type: ignore[dict-item]
    text = event_json(event)
    assert " " not in text.split('"data"')[0]  # compact
    assert json.loads(text)["data"] == {"when": "2026-11-30T00:00:00+00:00", "1": "key"}
    assert json.loads(event_json(TurnEvent(type="tool_end", seq=4, turn_id="t", ts="", data={"n": -(2**80)})))["data"] == {
        "n": -(2**80)}  # beyond orjson's 64 bits: the standard library encodes it


def test_an_sse_message_carries_the_log_id_its_type_and_the_event() -> None:
    event = TurnEvent(type="tool_end", seq=12, turn_id="turn-1", ts="2026-11-30T00:00:00+00:00", thread_id="t",
                      data={"summary": "two lines\r\nand a tab\t, quotes \" and é", "n": 2**70}, id=4321)
    message = to_sse(event).encode()
    assert message.startswith(b"id: 4321\r\nevent: tool_end\r\ndata: ")
    assert message.count(b"\n") == 4  # id, event, one data line, the blank line that ends it
    assert json.loads(message.split(b"\r\n")[2].removeprefix(b"data: ")) == event
