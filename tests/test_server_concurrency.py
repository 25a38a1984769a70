"""Concurrency over HTTP: one thread runs one request at a time, and a new message supersedes an approval.

Each race runs twice: both requests to one server (serialized by the hub's lock, then the
runner's advisory lock), and one request to each of two servers on the same database (two
apps, two pools, two hubs: only PostgreSQL's advisory lock stands between them).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from itertools import groupby, pairwise
from typing import Any

import httpx
import pytest

from tollgate.graph.store.db import Database
from tests.conftest import NOW, all_rows
from tests.harness import Clock
from tests.server_harness import Api, LiveServer, Streamed, serve

_SUPERSEDED = "replaced the earlier request awaiting approval"


@pytest.fixture(scope="module")
def second_server(live_server: LiveServer) -> Iterator[LiveServer]:
    """Another server on the same database, as a second process would be."""
    with serve(live_server.settings, clock=Clock(NOW)) as server:
        yield server


@pytest.fixture(params=["one-server", "two-servers"])
async def peer(request: pytest.FixtureRequest, api: Api) -> AsyncIterator[Api]:
    """The same owner, through the same server or through the second one."""
    if request.param == "one-server":
        yield api
        return
    server: LiveServer = request.getfixturevalue("second_server")
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        yield Api(client=client, owner=api.owner, token=api.token, contract=api.contract)


async def _approvals(db: Database, thread_id: str) -> dict[str, str]:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT approval_id, status FROM approvals WHERE thread_id = %s", (thread_id,))
        return {r["approval_id"]: r["status"] for r in await cur.fetchall()}


async def _lunch(db: Database, owner: str) -> str:
    async with all_rows(db) as conn:
        cur = await conn.execute(
            "SELECT status FROM calendar_events WHERE owner_id = %s AND title = 'Lunch with Sam'", (owner,)
        )
        row = await cur.fetchone()
    assert row is not None
    return str(row["status"])


async def _effects(db: Database, owner: str) -> int:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM effects WHERE owner_id = %s", (owner,))
        row = await cur.fetchone()
    return int(row["n"]) if row else -1


async def _assert_serialized(db: Database, thread_id: str) -> list[str]:
    """No two runs overlapped (each ended before the next began), and the checkpoints form one chain.

    A run is a stretch of one turn's events up to its terminal event; event times come from
    the nodes that emitted them, so they show when each run really executed. Returns the
    turns in the order they ran.
    """
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT event FROM turn_events WHERE thread_id = %s", (thread_id,))
        events = [r["event"] for r in await cur.fetchall()]
        cur = await conn.execute(
            "SELECT checkpoint_id, parent_checkpoint_id FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = ''",
            (thread_id,),
        )
        links = {r["checkpoint_id"]: r["parent_checkpoint_id"] for r in await cur.fetchall()}
    runs: list[list[dict[str, Any]]] = []
    for _, turn_events in groupby(sorted(events, key=lambda e: (e["turn_id"], e["seq"])), key=lambda e: e["turn_id"]):
        current: list[dict[str, Any]] = []
        for event in turn_events:
            current.append(event)
            if event["type"] in ("message_complete", "approval_required"):
                runs.append(current)
                current = []
    runs.sort(key=lambda run: datetime.fromisoformat(run[0]["ts"]))
    for before, after in pairwise(runs):
        assert datetime.fromisoformat(before[-1]["ts"]) <= datetime.fromisoformat(after[0]["ts"]), "runs overlapped"
    parents = [p for p in links.values() if p is not None]
    assert len(parents) == len(set(parents)), "two runs forked from one checkpoint"
    assert sum(1 for p in links.values() if p is None) == 1  # one root: a single linear history
    return [turn for turn, _ in groupby(run[0]["turn_id"] for run in runs)]


async def test_two_messages_on_one_thread_run_one_after_the_other(api: Api, peer: Api, db: Database) -> None:
    listed = await api.chat("what's on my calendar today?")
    thread_id = listed.last["thread_id"]

    second, third = await asyncio.gather(
        api.chat("cancel the 2nd one", thread_id), peer.chat("cancel the 3rd one", thread_id)
    )
    assert second.last["type"] == third.last["type"] == "approval_required"
    blocks = await _assert_serialized(db, thread_id)
    assert blocks[0] == listed.last["turn_id"]
    first_done, last_done = (second, third) if blocks[1] == second.last["turn_id"] else (third, second)
    assert blocks[1:] == [first_done.last["turn_id"], last_done.last["turn_id"]]
    # The later message superseded the earlier approval: one pending, none lost in between.
    assert await _approvals(db, thread_id) == {
        first_done.last["data"]["approval_id"]: "superseded",
        last_done.last["data"]["approval_id"]: "pending",
    }
    pending = (await api.get("/v1/approvals")).json()["approvals"]
    assert [p["approval_id"] for p in pending] == [last_done.last["data"]["approval_id"]]


async def test_a_new_message_supersedes_the_pending_approval_and_says_so(api: Api, db: Database) -> None:
    thread_id, proposal = await api.list_then_propose()
    approval_id = proposal["data"]["approval_id"]

    reply = await api.chat("what's on my calendar today?", thread_id)
    text = reply.last["data"]["text"]
    assert _SUPERSEDED in text and proposal["data"]["preview"] in text
    assert await _approvals(db, thread_id) == {approval_id: "superseded"}
    assert (await api.get("/v1/approvals")).json() == {"approvals": []}
    detail = (await api.get(f"/v1/threads/{thread_id}")).json()
    assert detail["status"] == "idle" and detail["pending_approval"] is None

    late = await api.decide(approval_id, {"type": "approve"})
    assert late.status == 409 and late.body["code"] == "approval_invalid"
    assert await _lunch(db, api.owner) == "confirmed" and await _effects(db, api.owner) == 0


async def test_an_approval_racing_a_new_message_either_runs_or_is_superseded_never_both(
    api: Api, peer: Api, db: Database
) -> None:
    thread_id, proposal = await api.list_then_propose()
    decided, message = await asyncio.gather(
        api.decide(proposal["data"]["approval_id"], {"type": "approve"}),
        peer.chat("what's on my calendar today?", thread_id),
    )
    assert message.status == 200
    superseded = _SUPERSEDED in message.last["data"]["text"]
    if superseded:  # the message ran first: the approval can no longer run
        assert decided.status == 409 and decided.body["code"] == "approval_invalid"
        assert await _lunch(db, api.owner) == "confirmed" and await _effects(db, api.owner) == 0
    else:  # the approval ran first, then the message
        assert decided.status == 200 and decided.last["data"]["outcome"] == "executed"
        assert await _lunch(db, api.owner) == "cancelled" and await _effects(db, api.owner) == 1
    assert list((await _approvals(db, thread_id)).values()) == ["superseded" if superseded else "executed"]
    await _assert_serialized(db, thread_id)


async def test_two_approvals_of_one_request_run_it_once(api: Api, peer: Api, db: Database) -> None:
    thread_id, proposal = await api.list_then_propose()
    approval_id = proposal["data"]["approval_id"]
    results: list[Streamed] = list(await asyncio.gather(
        api.decide(approval_id, {"type": "approve"}, check=False),
        peer.decide(approval_id, {"type": "approve"}, check=False),
    ))
    assert sorted(r.status for r in results) == [200, 409]
    winner = next(r for r in results if r.status == 200)
    api.contract.check_run(winner.events, resume=True)
    assert winner.last["data"]["outcome"] == "executed"
    assert await _lunch(db, api.owner) == "cancelled" and await _effects(db, api.owner) == 1
    await _assert_serialized(db, thread_id)


async def test_remembered_thread_ownership_is_per_owner_and_bounded(db: Database) -> None:
    """The early ownership check skips its query only for a (owner, thread) pair it has seen."""
    from tollgate.policies.errors import NotFound
    from tollgate.web.store import OwnedThreads, create_thread

    owned = OwnedThreads(size=2)
    mine = await create_thread(db, "owner-a")
    await owned.require(db, "owner-a", mine)  # looked up, then remembered
    with pytest.raises(NotFound):
        await owned.require(db, "owner-b", mine)  # another owner is never answered from memory
    owned.remember("owner-a", "t-2")
    owned.remember("owner-a", "t-3")  # evicts the oldest pair
    with pytest.raises(NotFound):
        await owned.require(db, "owner-a", "t-2-never-stored")
    assert ("owner-a", mine) not in owned._known and len(owned._known) == 2
