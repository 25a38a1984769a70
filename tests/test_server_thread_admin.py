"""What a chat page needs of its threads: titles, rename, search, soft delete, decided approvals, stop."""

from __future__ import annotations

import asyncio

import httpx

from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database
from tests.conftest import all_rows
from tests.fakes import ScriptedModel, say
from tests.harness import Clock
from tests.server_harness import Api, serve
from tollgate.web.auth import issue_token


async def test_a_write_first_thread_is_titled_by_its_message_not_its_id(api: Api) -> None:
    proposed = await api.chat("remind me to call the plumber tomorrow at 9am")
    assert proposed.last["type"] == "approval_required"
    thread_id = proposed.last["thread_id"]
    [listed] = [t for t in (await api.get("/v1/threads")).json()["threads"] if t["thread_id"] == thread_id]
    assert listed["title"] == "remind me to call the plumber tomorrow at 9am"
    assert (await api.get(f"/v1/threads/{thread_id}")).json()["title"] == listed["title"]


async def test_rename_search_and_soft_delete(api: Api, db: Database) -> None:
    first = (await api.chat("what's on my calendar today?")).last["thread_id"]
    second, _ = await api.list_then_propose()

    renamed = await api.client.patch(f"/v1/threads/{first}", headers=api.auth, json={"title": "  Monday plans "})
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["title"] == "Monday plans"
    found = (await api.get("/v1/threads", params={"q": "MONDAY"})).json()["threads"]
    assert [t["thread_id"] for t in found] == [first]  # by title, case-insensitive
    found = (await api.get("/v1/threads", params={"q": "lunch with sam"})).json()["threads"]
    assert {t["thread_id"] for t in found} == {first, second}  # by what was said (the replies list it)
    assert (await api.get("/v1/threads", params={"q": "100%_"})).json()["threads"] == []  # wildcards are literal
    back = await api.client.patch(f"/v1/threads/{first}", headers=api.auth, json={"title": ""})
    assert back.json()["title"] == "what's on my calendar today?"  # empty: its first message again

    gone = await api.client.delete(f"/v1/threads/{second}", headers=api.auth)
    assert gone.status_code == 204
    assert second not in {t["thread_id"] for t in (await api.get("/v1/threads?kind=all")).json()["threads"]}
    assert (await api.get(f"/v1/threads/{second}")).status_code == 404
    assert (await api.client.delete(f"/v1/threads/{second}", headers=api.auth)).status_code == 404
    refused = await api.chat("cancel the 2nd one", second, check=False)
    assert refused.status == 404
    async with all_rows(db) as conn:  # what it waited on can no longer run
        cur = await conn.execute("SELECT status, error_code FROM approvals WHERE thread_id = %s", (second,))
        assert await cur.fetchall() == [{"status": "superseded", "error_code": "deleted"}]
    assert (await api.get("/v1/approvals")).json()["approvals"] == []


async def test_another_owners_thread_cannot_be_renamed_or_deleted(api: Api, db: Database) -> None:
    thread_id = (await api.chat("what's on my calendar today?")).last["thread_id"]
    stranger = await issue_token(db, api.owner + "-other", label="test")
    headers = {"Authorization": f"Bearer {stranger}"}
    assert (await api.client.patch(f"/v1/threads/{thread_id}", headers=headers, json={"title": "x"})).status_code == 404
    assert (await api.client.delete(f"/v1/threads/{thread_id}", headers=headers)).status_code == 404
    assert (await api.client.post(f"/v1/threads/{thread_id}/stop", headers=headers)).status_code == 404
    assert (await api.get(f"/v1/threads/{thread_id}")).status_code == 200


async def test_decided_approvals_stay_in_the_thread_with_the_decision_and_when(api: Api) -> None:
    thread_id, proposed = await api.list_then_propose()
    approval_id = proposed["data"]["approval_id"]
    done = await api.decide(approval_id, {"type": "approve"})
    assert done.last["data"]["outcome"] == "executed"
    detail = (await api.get(f"/v1/threads/{thread_id}")).json()
    assert detail["pending_approval"] is None
    [decided] = detail["approvals"]
    assert decided["approval_id"] == approval_id
    assert decided["status"] == "executed" and decided["decision"] == "approve"
    assert decided["decided_via"] == "chat" and decided["owner_id"] == api.owner
    assert decided["decided_at"] is not None
    assert "Lunch with Sam" in decided["preview"]


async def test_stop_cancels_a_running_turn_and_the_thread_stays_usable(settings: Settings, demo_token: str) -> None:
    from tests.conftest import NOW, all_rows

    model = ScriptedModel(steps=[say("Hello."), say("never said"), say("Back again.")])
    auth = {"Authorization": f"Bearer {demo_token}"}
    roomy = settings.model_copy(update={"rate_limit_burst": 1000})
    with serve(roomy, picker_model=model, clock=Clock(NOW)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            first = await client.post("/v1/chat", headers={**auth, "Accept": "application/json"}, json={"message": "hi"})
            thread_id = first.json()["thread_id"]
            model.latency = 30.0  # a slow model: the next turn is still thinking when stop arrives

            async def send() -> httpx.Response:
                return await client.post("/v1/chat", headers={**auth, "Accept": "application/json"},
                                         json={"message": "think hard", "thread_id": thread_id})

            sending = asyncio.create_task(send())
            for _ in range(200):
                if (await client.get(f"/v1/threads/{thread_id}", headers=auth)).json()["status"] == "running":
                    break
                await asyncio.sleep(0.05)
            stopped = await client.post(f"/v1/threads/{thread_id}/stop", headers=auth)
            assert stopped.status_code == 200 and stopped.json() == {"stopped": True}
            answer = await asyncio.wait_for(sending, 20)  # well before the model's 30 s
            # Stopped while the model was still thinking, before the turn's first event.
            assert answer.status_code == 409, answer.text
            assert answer.json()["code"] == "cancelled"

            model.latency = 0.0
            model.steps[:] = [say("Back again.")]
            again = await client.post("/v1/chat", headers={**auth, "Accept": "application/json"},
                                      json={"message": "are you there?", "thread_id": thread_id})
            assert again.status_code == 200, again.text
            assert again.json()["reply"] == "Back again."
            idle = await client.post(f"/v1/threads/{thread_id}/stop", headers=auth)
            assert idle.json() == {"stopped": False}


async def test_stop_reaches_the_server_process_that_runs_the_turn(settings: Settings, demo_token: str) -> None:
    """Two API servers on one database: the owner presses stop on one, the turn runs on the other."""
    from tests.conftest import NOW

    model = ScriptedModel(steps=[say("Hello."), say("never said")])
    auth = {"Authorization": f"Bearer {demo_token}", "Accept": "application/json"}
    roomy = settings.model_copy(update={"rate_limit_burst": 1000})
    with serve(roomy, picker_model=model, clock=Clock(NOW)) as running, serve(roomy, clock=Clock(NOW)) as other:
        async with httpx.AsyncClient(timeout=60) as client:
            first = await client.post(f"{running.url}/v1/chat", headers=auth, json={"message": "hi"})
            thread_id = first.json()["thread_id"]
            model.latency = 30.0
            sending = asyncio.create_task(client.post(f"{running.url}/v1/chat", headers=auth,
                                                      json={"message": "think hard", "thread_id": thread_id}))
            for _ in range(200):  # a stop before the turn holds its thread finds nothing to stop: press again
                stopped = await client.post(f"{other.url}/v1/threads/{thread_id}/stop", headers=auth)
                if stopped.json() == {"stopped": True}:
                    break
                await asyncio.sleep(0.05)
            assert stopped.json() == {"stopped": True}
            answer = await asyncio.wait_for(sending, 20)  # well before the model's 30 s
            assert answer.status_code == 409 and answer.json()["code"] == "cancelled"


async def test_a_stop_of_a_turn_waiting_in_another_process_says_it_stopped_it(
    settings: Settings, db: Database, demo_token: str
) -> None:
    """A turn queued behind its owner's only slot holds no lease yet: the process running it stops it
    when it hears the stop, and the stop pressed on another process answers that it did (it said
    ``stopped: false`` while the turn was being stopped)."""
    from tests.conftest import NOW

    model = ScriptedModel(steps=[say("Hello A."), say("Hello B."), say("never said")])
    auth = {"Authorization": f"Bearer {demo_token}", "Accept": "application/json"}
    one_slot = settings.model_copy(update={"rate_limit_burst": 1000, "max_turns_per_owner": 1})
    with serve(one_slot, picker_model=model, clock=Clock(NOW)) as running, serve(one_slot, clock=Clock(NOW)) as other:
        async with httpx.AsyncClient(timeout=60) as client:
            threads = [(await client.post(f"{running.url}/v1/chat", headers=auth, json={"message": "hi"})).json()["thread_id"]
                       for _ in range(2)]
            model.latency = 30.0
            slow = asyncio.create_task(client.post(f"{running.url}/v1/chat", headers=auth,
                                                   json={"message": "think hard", "thread_id": threads[0]}))
            for _ in range(200):  # until the slow turn holds the owner's one slot (and its thread)
                if await _held(db, threads[0]):
                    break
                await asyncio.sleep(0.05)
            queued = asyncio.create_task(client.post(f"{running.url}/v1/chat", headers=auth,
                                                     json={"message": "and this", "thread_id": threads[1]}))
            await asyncio.sleep(0.5)  # it waits for the slot, holding no lease
            assert not queued.done() and not await _held(db, threads[1])
            stopped = await client.post(f"{other.url}/v1/threads/{threads[1]}/stop", headers=auth)
            assert stopped.json() == {"stopped": True}
            answer = await asyncio.wait_for(queued, 20)
            assert answer.status_code == 409 and answer.json()["code"] == "cancelled"
            assert (await client.post(f"{other.url}/v1/threads/{threads[0]}/stop", headers=auth)).json() == {"stopped": True}
            assert (await asyncio.wait_for(slow, 20)).status_code == 409


async def _held(db: Database, thread_id: str) -> bool:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT 1 FROM thread_leases WHERE thread_id = %s AND holder IS NOT NULL"
                                 " AND expires_at > clock_timestamp()", (thread_id,))
        return await cur.fetchone() is not None
