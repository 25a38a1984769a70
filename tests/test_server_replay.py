"""Resumable streams: reconnecting with Last-Event-ID replays what came after it, finished or in flight."""

from __future__ import annotations

import httpx
from httpx_sse import aconnect_sse

from tollgate.graph.event_contract import EventContract
from tollgate.graph.events import TurnEvent
from tollgate.graph.services import Hooks
from tollgate.graph.store.db import Database
from tests.conftest import NOW, all_rows
from tests.harness import Clock
from tests.server_harness import Api, LiveServer, serve
from tollgate.web.hub import FAILED_RUN_MESSAGE


async def test_replay_of_a_finished_turn_returns_exactly_what_came_after_the_id(api: Api) -> None:
    out = await api.chat("what's on my calendar today?")
    thread_id, turn_id = out.last["thread_id"], out.last["turn_id"]

    after = str(out.events[1]["id"])
    tail = await api.stream("GET", f"/v1/threads/{thread_id}/events", headers={"Last-Event-ID": after}, check=False)
    assert tail.status == 200
    assert tail.events == out.events[2:]  # byte-for-byte the events streamed the first time
    assert tail.ids == [str(e["id"]) for e in tail.events]

    whole = await api.stream("GET", f"/v1/threads/{thread_id}/events?turn_id={turn_id}", check=False)
    assert whole.events == out.events
    EventContract().check_run(whole.events)

    caught_up = await api.stream(
        "GET", f"/v1/threads/{thread_id}/events", headers={"Last-Event-ID": str(out.last["id"])}, check=False
    )
    assert caught_up.status == 200 and caught_up.events == []  # nothing after the terminal event: the stream ends


async def test_replay_spans_the_interrupt_and_the_resume_of_a_turn(api: Api) -> None:
    thread_id, proposal = await api.list_then_propose()
    approved = await api.decide(proposal["data"]["approval_id"], {"type": "approve"})

    replay = await api.stream("GET", f"/v1/threads/{thread_id}/events", check=False)
    runs = replay.runs()
    assert [run[-1]["type"] for run in runs] == ["approval_required", "message_complete"]
    assert runs[0][-1] == proposal and runs[1] == approved.events
    contract = EventContract()
    contract.check_run(runs[0])
    contract.check_run(runs[1], resume=True)

    older = await api.stream(
        "GET", f"/v1/threads/{thread_id}/events", headers={"Last-Event-ID": str(replay.events[0]["id"])}, check=False
    )
    assert older.events == replay.events[1:]


async def test_last_event_id_alone_resumes_across_turns(api: Api) -> None:
    """An id seen in one turn resumes into the next: nothing of the newer turn is lost or repeated."""
    first = await api.chat("what's on my calendar today?")
    thread_id = first.last["thread_id"]
    second = await api.chat("and my tasks?", thread_id)
    seen = str(first.events[2]["id"])
    tail = await api.stream("GET", f"/v1/threads/{thread_id}/events", headers={"Last-Event-ID": seen}, check=False)
    assert tail.events == first.events[3:] + second.events
    assert [int(i) for i in tail.ids] == sorted(int(i) for i in tail.ids)


async def test_reconnecting_to_a_turn_in_flight_follows_it_to_its_end(api: Api, db: Database) -> None:
    thread_id, proposal = await api.list_then_propose()
    approval_url = f"/v1/approvals/{proposal['data']['approval_id']}/decision"
    events_url = f"/v1/threads/{thread_id}/events"
    head: list[TurnEvent] = []
    async with db.pool.connection() as blocker:
        # Hold the calendar row: the approved write starts, then waits on it. A turn in flight.
        await blocker.execute("BEGIN")
        await blocker.execute("SELECT set_config('tollgate.owner', '*', true)")  # row security: see the row to lock it
        await blocker.execute(
            "SELECT 1 FROM calendar_events WHERE id = %s FOR UPDATE", (proposal["data"]["args"]["event_id"],)
        )
        async with aconnect_sse(api.client, "POST", approval_url, json={"type": "approve"}, headers=api.auth) as src:
            async for message in src.aiter_sse():
                head.append(message.json())
                if message.event == "tool_start":
                    break  # the client drops the connection mid-turn
        assert [e["type"] for e in head] == ["approval_decided", "tool_start"]
        detail = (await api.get(f"/v1/threads/{thread_id}")).json()
        assert detail["status"] == "running" and detail["latest_seq"] == head[-1]["seq"]

        resumed = {**api.auth, "Last-Event-ID": str(head[-1]["id"])}
        async with aconnect_sse(api.client, "GET", events_url, headers=resumed) as src:
            assert src.response.status_code == 200  # the reconnect is open while the turn is blocked
            await blocker.execute("COMMIT")  # let the write go on
            tail = [(message.id, message.json()) for message in [m async for m in src.aiter_sse()]]

    assert [event["type"] for _, event in tail] == ["tool_end", "planner_decision", "message_complete"]
    assert [sse_id for sse_id, _ in tail] == [str(event["id"]) for _, event in tail]
    assert tail[-1][1]["data"]["outcome"] == "executed"
    api.contract.check_run(head + [event for _, event in tail], resume=True)


async def test_replay_is_refused_for_unknown_turns_and_malformed_ids(api: Api) -> None:
    out = await api.chat("what's on my calendar today?")
    thread_id = out.last["thread_id"]
    unknown_turn = await api.get(f"/v1/threads/{thread_id}/events?turn_id=turn_0000")
    assert unknown_turn.status_code == 404 and unknown_turn.json()["code"] == "not_found"
    bad_id = await api.get(f"/v1/threads/{thread_id}/events", headers={"Last-Event-ID": "abc"})
    assert bad_id.status_code == 422 and bad_id.json()["code"] == "invalid_args"


def _fail_after_the_write(_key: str) -> None:
    raise RuntimeError("injected: the process fails right after the write commits")


async def test_a_run_that_fails_mid_stream_ends_with_a_fatal_error_and_the_thread_recovers(
    api: Api, live_server: LiveServer, db: Database
) -> None:
    thread_id, proposal = await api.list_then_propose()
    faults = Hooks(after_effect_commit=_fail_after_the_write)
    with serve(live_server.settings, clock=Clock(NOW), hooks=faults) as faulty:
        async with httpx.AsyncClient(base_url=faulty.url, timeout=60) as client:
            broken = await Api(client=client, owner=api.owner, token=api.token).decide(
                proposal["data"]["approval_id"], {"type": "approve"}, check=False
            )
    assert broken.status == 200
    assert [e["type"] for e in broken.events] == ["approval_decided", "tool_start", "error"]
    assert broken.last["data"] == {"code": "unavailable", "message": FAILED_RUN_MESSAGE, "fatal": True}
    assert broken.ids == [str(e["id"]) for e in broken.events]  # recorded like any event: replayable

    # The failure is in the log: the thread is not "running" forever, and a reconnect ends at once.
    detail = (await api.get(f"/v1/threads/{thread_id}")).json()
    assert detail["status"] != "running" and detail["latest_seq"] == broken.last["seq"]
    tail = await api.stream("GET", f"/v1/threads/{thread_id}/events",
                            headers={"Last-Event-ID": str(broken.events[0]["id"])}, check=False)
    assert tail.events == broken.events[1:]

    # A new message starts afresh on the thread; the write that did commit happened once.
    after = await api.chat("what's on my calendar today?", thread_id)
    assert after.last["type"] == "message_complete"
    assert (await api.get("/v1/approvals")).json() == {"approvals": []}
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM effects WHERE owner_id = %s", (api.owner,))
        row = await cur.fetchone()
    assert row is not None and row["n"] == 1
