"""The chat and approval API over real sockets: SSE in contract order, approve / edit / reject."""

from __future__ import annotations

import uuid

import pytest

from tollgate.graph.store.db import Database
from tests.conftest import all_rows
from tests.server_harness import Api
from tests.harness import what_runs


async def _calendar(db: Database, owner: str) -> dict[str, str]:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT title, status FROM calendar_events WHERE owner_id = %s", (owner,))
        return {r["title"]: r["status"] for r in await cur.fetchall()}


async def _effects(db: Database, owner: str) -> int:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM effects WHERE owner_id = %s", (owner,))
        row = await cur.fetchone()
        return int(row["n"]) if row else -1


async def test_chat_streams_a_read_turn_as_sse_in_contract_order(api: Api) -> None:
    out = await api.chat("what's on my calendar today?")
    assert out.status == 200 and out.content_type.startswith("text/event-stream")
    assert out.ids == [str(e["id"]) for e in out.events]  # id: is the event's id in the log
    assert out.types == [e["type"] for e in out.events]  # event: is its type
    assert [e["type"] for e in out.events] == [
        "planner_decision", "tool_start", "tool_end", "planner_decision", "message_complete"
    ]
    assert out.events[1]["data"]["tool"] == "calendar" and out.events[1]["data"]["action"] == "list"
    assert "Lunch with Sam" in out.last["data"]["text"] and out.last["data"]["outcome"] == "read"
    thread_id = out.last["thread_id"]
    assert str(uuid.UUID(thread_id)) == thread_id and {e["thread_id"] for e in out.events} == {thread_id}
    assert api.contract.runs_checked == 1

    listed = (await api.get("/v1/threads")).json()["threads"]
    assert [(t["thread_id"], t["status"], t["title"]) for t in listed] == [
        (thread_id, "idle", "what's on my calendar today?")
    ]


async def test_chat_continues_a_thread_and_the_thread_reads_back(api: Api) -> None:
    thread_id, proposal = await api.list_then_propose()
    assert what_runs(proposal["data"]["preview"]).startswith("Cancel “Lunch with Sam”")
    assert "token" not in str(proposal["data"])  # tokens never leave the server

    detail = (await api.get(f"/v1/threads/{thread_id}")).json()
    assert detail["status"] == "awaiting_approval"
    assert [m["role"] for m in detail["messages"]] == ["user", "assistant"]  # the pending turn is not in it yet
    assert detail["pending_approval"]["approval_id"] == proposal["data"]["approval_id"]
    assert detail["latest_turn_id"] == proposal["turn_id"] and detail["latest_seq"] == proposal["seq"]
    pending = (await api.get("/v1/approvals")).json()["approvals"]
    assert pending == [detail["pending_approval"]]


async def test_approve_over_http_runs_exactly_the_previewed_write_once(api: Api, db: Database) -> None:
    thread_id, proposal = await api.list_then_propose()
    approval_id = proposal["data"]["approval_id"]

    done = await api.decide(approval_id, {"type": "approve"})
    assert done.status == 200
    # The write ran, then the loop asked the model again (it had nothing more to do), then the reply.
    assert [e["type"] for e in done.events] == [
        "approval_decided", "tool_start", "tool_end", "planner_decision", "message_complete"]
    assert done.events[0]["turn_id"] == proposal["turn_id"] and done.events[0]["seq"] == proposal["seq"] + 1
    assert done.last["data"]["outcome"] == "executed" and "Lunch with Sam" in done.last["data"]["text"]
    assert (await _calendar(db, api.owner))["Lunch with Sam"] == "cancelled"
    assert (await api.get("/v1/approvals")).json() == {"approvals": []}
    assert (await api.get(f"/v1/threads/{thread_id}")).json()["status"] == "idle"

    again = await api.decide(approval_id, {"type": "approve"})
    assert again.status == 409 and again.body["code"] == "approval_invalid"
    assert await _effects(db, api.owner) == 1


async def test_edit_over_http_is_checked_then_runs_on_the_edited_target(api: Api, db: Database) -> None:
    _, proposal = await api.list_then_propose()
    done = await api.decide(proposal["data"]["approval_id"], {"type": "edit", "args": {"event_id": "#3"}, "run": True})
    assert done.status == 200 and done.events[0]["data"]["decision"] == "edit"
    assert done.last["data"]["outcome"] == "executed"
    calendar = await _calendar(db, api.owner)
    assert calendar["Design review"] == "cancelled" and calendar["Lunch with Sam"] == "confirmed"


async def test_an_edit_over_http_comes_back_as_a_new_preview_to_approve(api: Api, db: Database) -> None:
    _, proposal = await api.list_then_propose()
    done = await api.decide(proposal["data"]["approval_id"], {"type": "edit", "args": {"event_id": "#3"}})
    assert done.status == 200 and done.last["type"] == "approval_required"
    fresh = done.last["data"]
    assert fresh["approval_id"] != proposal["data"]["approval_id"] and "Design review" in fresh["preview"]
    assert (await _calendar(db, api.owner))["Design review"] == "confirmed"  # nothing ran yet
    listed = (await api.get("/v1/approvals")).json()["approvals"]
    assert [a["approval_id"] for a in listed] == [fresh["approval_id"]]
    assert listed[0]["actions"][0]["preview"] == fresh["preview"]
    approved = await api.decide(fresh["approval_id"], {"type": "approve"})
    assert approved.last["data"]["outcome"] == "executed"
    calendar = await _calendar(db, api.owner)
    assert calendar["Design review"] == "cancelled" and calendar["Lunch with Sam"] == "confirmed"
    assert await _effects(db, api.owner) == 1


async def test_an_edit_naming_an_item_off_the_list_is_refused_and_the_approval_stays_pending(
    api: Api, db: Database
) -> None:
    _, proposal = await api.list_then_propose()
    before = await _calendar(db, api.owner)
    approval_id = proposal["data"]["approval_id"]
    done = await api.decide(approval_id, {"type": "edit", "args": {"event_id": "evt_not_listed"}}, check=False)
    assert done.status == 422 and done.body is not None and done.body["code"] == "off_list_id"
    assert await _calendar(db, api.owner) == before and await _effects(db, api.owner) == 0
    listed = (await api.get("/v1/approvals")).json()["approvals"]
    assert [a["approval_id"] for a in listed] == [approval_id]
    deep: object = "#3"
    for _ in range(300):
        deep = {"k": deep}
    nested = await api.decide(approval_id, {"type": "edit", "args": {"event_id": deep}}, check=False)
    assert nested.status == 422 and nested.body is not None and nested.body["code"] == "invalid_args"
    approved = await api.decide(approval_id, {"type": "approve"})  # still pending: it runs, once
    assert approved.last["data"]["outcome"] == "executed" and await _effects(db, api.owner) == 1


async def test_reject_over_http_changes_nothing_and_quotes_the_reason(api: Api, db: Database) -> None:
    _, proposal = await api.list_then_propose()
    before = await _calendar(db, api.owner)
    done = await api.decide(proposal["data"]["approval_id"], {"type": "reject", "message": "keep lunch"})
    assert done.status == 200 and done.last["data"]["outcome"] == "rejected"
    assert "nothing was changed" in done.last["data"]["text"] and "keep lunch" in done.last["data"]["text"]
    assert await _calendar(db, api.owner) == before and await _effects(db, api.owner) == 0


async def test_clients_asking_for_json_get_the_whole_run_as_one_result(api: Api, db: Database) -> None:
    json_accept = {**api.auth, "Accept": "application/json"}
    listed = await api.client.post("/v1/chat", json={"message": "what's on my calendar today?"}, headers=json_accept)
    assert listed.status_code == 200 and listed.headers["content-type"] == "application/json"
    thread_id = listed.json()["thread_id"]
    proposed = (await api.client.post(
        "/v1/chat", json={"thread_id": thread_id, "message": "cancel the 2nd one"}, headers=json_accept
    )).json()
    assert proposed["outcome"] == "proposed" and proposed["reply"] is None
    api.contract.check_run(proposed["events"])
    approval = proposed["approval"]
    assert what_runs(approval["preview"]).startswith("Cancel “Lunch with Sam”") and approval["thread_id"] == thread_id

    decided = await api.client.post(
        f"/v1/approvals/{approval['approval_id']}/decision", json={"type": "approve"}, headers=json_accept
    )
    assert decided.status_code == 200
    result = decided.json()
    api.contract.check_run(result["events"], resume=True)
    assert result["outcome"] == "executed" and result["turn_id"] == proposed["turn_id"]
    assert (await _calendar(db, api.owner))["Lunch with Sam"] == "cancelled"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        pytest.param({"message": ""}, "body.message", id="empty-message"),
        pytest.param({"message": "   "}, "body.message", id="blank-message"),
        pytest.param({"message": "a\x00b"}, "body.message", id="nul-in-message"),
        pytest.param({"message": "x" * 8001}, "body.message", id="message-too-long"),
        pytest.param({"message": "hi", "owner_id": "someone-else"}, "body.owner_id", id="unknown-field-owner"),
        pytest.param({"message": "hi", "thread_id": "../etc"}, "body.thread_id", id="thread-id-with-slash"),
        pytest.param({"message": 7}, "body.message", id="message-not-a-string"),
    ],
)
async def test_chat_refuses_malformed_requests_with_422(api: Api, body: object, where: str) -> None:
    response = await api.client.post("/v1/chat", json=body, headers=api.auth)
    assert response.status_code == 422
    error = response.json()
    assert error["code"] == "invalid_args" and any(v.startswith(where) for v in error["violations"])
    assert "someone-else" not in response.text  # inputs are never echoed


@pytest.mark.parametrize(
    "decision",
    [
        pytest.param({"type": "edit"}, id="edit-without-args"),
        pytest.param({"type": "approve", "args": {"event_id": "#1"}}, id="approve-with-args"),
        pytest.param({"type": "approve", "message": "why"}, id="approve-with-message"),
        pytest.param({"type": "maybe"}, id="unknown-type"),
        pytest.param({"type": "approve", "token": "forged"}, id="client-supplied-token"),
    ],
)
async def test_malformed_decisions_are_refused_and_leave_the_approval_pending(api: Api, decision: object) -> None:
    _, proposal = await api.list_then_propose()
    response = await api.client.post(
        f"/v1/approvals/{proposal['data']['approval_id']}/decision", json=decision, headers=api.auth
    )
    assert response.status_code == 422 and response.json()["code"] == "invalid_args"
    pending = (await api.get("/v1/approvals")).json()["approvals"]
    assert [p["approval_id"] for p in pending] == [proposal["data"]["approval_id"]]
