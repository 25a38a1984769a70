"""Auth and tenancy over real sockets: 401 without a valid token, 404 across owners, hashed tokens, 429."""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Any

import httpx
import pytest

from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database
from tollgate.graph.store.owner_scope import owner_transaction
from tollgate.server import create_app
from tests.conftest import NOW, all_rows
from tests.harness import Clock
from tests.server_harness import Api, serve
from tollgate.tools.demo import seed_demo
from tollgate.web.auth import ensure_demo_token, issue_token, revoke_token

_SPEC: dict[str, Any] = create_app().openapi()  # building the schema does no I/O
_PUBLIC = {("GET", "/healthz"), ("GET", "/readyz")}
_OPERATIONS = sorted((method.upper(), path) for path, ops in _SPEC["paths"].items() for method in ops)
_PROTECTED = [op for op in _OPERATIONS if op not in _PUBLIC]
_BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/v1/chat"): {"message": "what's on my calendar today?"},
    ("POST", "/v1/approvals/{approval_id}/decision"): {"type": "approve"},
    ("PATCH", "/v1/threads/{thread_id}"): {"title": "mine now"},
}
_UNKNOWN_THREAD = "00000000-0000-4000-8000-000000000000"
_UNKNOWN_APPROVAL = "apv_00000000000000000000000000000000"


def _fill(path: str, thread_id: str, approval_id: str) -> str:
    path = path.replace("{thread_id}", thread_id).replace("{approval_id}", approval_id)
    return re.sub(r"\{[a-z_]+\}", "x", path)  # any other path parameter (another surface's routes)


def _op_id(op: tuple[str, str]) -> str:
    return f"{op[0]} {op[1]}"


_OURS = [
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/v1/approvals"),
    ("GET", "/v1/threads"),
    ("GET", "/v1/threads/{thread_id}"),
    ("GET", "/v1/threads/{thread_id}/events"),
    ("POST", "/v1/approvals/{approval_id}/decision"),
    ("POST", "/v1/chat"),
]


def test_the_chat_approval_and_health_routes_are_all_there() -> None:
    assert set(_OURS) <= set(_OPERATIONS)


@pytest.mark.parametrize("operation", _PROTECTED, ids=_op_id)
def test_every_protected_operation_declares_bearer_auth_401_and_429(operation: tuple[str, str]) -> None:
    method, path = operation
    spec = _SPEC["paths"][path][method.lower()]
    assert spec["security"] == [{"HTTPBearer": []}]
    for status in ("401", "429"):
        assert spec["responses"][status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorBody"
        }
    assert "Retry-After" in spec["responses"]["429"]["headers"]


@pytest.mark.parametrize("operation", _OURS, ids=_op_id)
def test_every_operation_documents_its_error_statuses_with_one_error_shape(operation: tuple[str, str]) -> None:
    method, path = operation
    responses = _SPEC["paths"][path][method.lower()]["responses"]
    expected = {"200"}
    if operation in _PUBLIC:
        expected |= {"503"} if path == "/readyz" else set()
    else:
        expected |= {"401", "429", "503"}
        if "{" in path or method == "POST" or path == "/v1/threads":
            expected.add("422")
        if "{" in path or path == "/v1/chat":
            expected.add("404")
        if "approval_id" in path or path == "/v1/chat":
            expected.add("409")  # an approval no longer pending; a chat message to a run or inbox thread
    assert set(responses) == expected
    for status in expected - {"200"}:
        schema = responses[status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorBody"}


@pytest.mark.parametrize(
    "authorization",
    [
        pytest.param(None, id="no-header"),
        pytest.param("Bearer", id="empty-bearer"),
        pytest.param("Basic dXNlcjpwYXNz", id="basic-scheme"),
        pytest.param("Bearer tg_" + "A" * 43, id="unknown-token"),
        pytest.param("Bearer not-a-tollgate-token", id="foreign-format"),
        pytest.param("Bearer tg_" + "x" * 5000, id="oversized-token"),
    ],
)
@pytest.mark.parametrize("operation", _PROTECTED, ids=_op_id)
async def test_every_route_but_health_answers_401_without_a_valid_token(
    api: Api, operation: tuple[str, str], authorization: str | None
) -> None:
    method, path = operation
    thread_id, proposal = _UNKNOWN_THREAD, _UNKNOWN_APPROVAL
    headers = {"Authorization": authorization} if authorization is not None else {}
    response = await api.client.request(
        method, _fill(path, thread_id, proposal), json=_BODIES.get(operation), headers=headers
    )
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json() == {"code": "unauthenticated", "message": "a valid bearer token is required",
                               "violations": []}


async def test_a_revoked_token_is_refused_everywhere(api: Api, db: Database) -> None:
    assert (await api.get("/v1/threads")).status_code == 200
    assert await revoke_token(db, api.token)
    for method, path in _PROTECTED:
        response = await api.client.request(
            method, _fill(path, _UNKNOWN_THREAD, _UNKNOWN_APPROVAL), json=_BODIES.get((method, path)),
            headers=api.auth,
        )
        assert response.status_code == 401, (method, path)
    assert not await revoke_token(db, api.token)


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
async def test_health_needs_no_token(api: Api, path: str) -> None:
    response = await api.client.get(path)
    assert response.status_code == 200 and response.json()["status"] in ("ok", "ready")


async def test_tokens_are_stored_only_as_sha256(api: Api, db: Database) -> None:
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT * FROM api_tokens WHERE owner_id = %s", (api.owner,))
        rows = await cur.fetchall()
    assert [r["token_hash"] for r in rows] == [hashlib.sha256(api.token.encode()).hexdigest()]
    assert api.token not in str(rows)


async def test_the_demo_token_maps_to_the_demo_owner(api: Api, db: Database) -> None:
    token = await ensure_demo_token(db)
    assert token.startswith("tg_") and token != await ensure_demo_token(db)
    response = await api.client.get("/v1/approvals", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200


async def test_the_key_header_the_langgraph_sdks_send_is_accepted_like_a_bearer_token(api: Api) -> None:
    """agent-chat-ui and the LangGraph SDKs send their API key as ``X-Api-Key``."""
    ok = await api.client.get("/v1/threads", headers={"X-Api-Key": api.token})
    assert ok.status_code == 200
    same = await api.client.get("/v1/threads", headers={"X-Api-Key": api.token, **api.auth})
    assert same.status_code == 200
    # Two different credentials: which one is meant cannot be known, so neither is used.
    both = await api.client.get("/v1/threads", headers={"X-Api-Key": "tg_" + "A" * 43, **api.auth})
    assert both.status_code == 401
    assert (await api.client.get("/v1/threads", headers={"X-Api-Key": "tg_" + "A" * 43})).status_code == 401


# ---- tenancy ------------------------------------------------------------------------------------

_SCOPED = [op for op in _PROTECTED if "{thread_id}" in op[1] or "{approval_id}" in op[1] or op == ("POST", "/v1/chat")]


@pytest.fixture
async def intruder(api: Api, db: Database) -> Api:
    """A second owner with data of their own, on the same server."""
    other = "o_" + secrets.token_hex(6)
    async with owner_transaction(db.pool, other) as conn:
        await seed_demo(conn, other, NOW, "Europe/Paris")
    return Api(client=api.client, owner=other, token=await issue_token(db, other))


def test_the_tenancy_tests_cover_every_thread_or_approval_scoped_route() -> None:
    assert sorted(_SCOPED) == sorted([
        ("GET", "/v1/threads/{thread_id}"),
        ("PATCH", "/v1/threads/{thread_id}"),
        ("DELETE", "/v1/threads/{thread_id}"),
        ("POST", "/v1/threads/{thread_id}/stop"),
        ("GET", "/v1/threads/{thread_id}/events"),
        ("POST", "/v1/approvals/{approval_id}/decision"),
        ("POST", "/v1/chat"),
    ])


def _request(operation: tuple[str, str], thread_id: str, approval_id: str) -> tuple[str, str, dict[str, Any] | None]:
    method, path = operation
    body: dict[str, Any] | None = _BODIES.get(operation)
    if operation == ("POST", "/v1/chat"):
        body = {"thread_id": thread_id, "message": "cancel the 2nd one"}
    return method, _fill(path, thread_id, approval_id), body


_DECISIONS: list[dict[str, Any]] = [
    {"type": "approve"},
    {"type": "reject", "message": "no"},
    {"type": "edit", "args": {"event_id": "#1"}},
]
_TENANCY_CASES = [
    pytest.param(op, decision, id=f"{_op_id(op)} {decision['type']}" if "approval_id" in op[1] else _op_id(op))
    for op in _SCOPED
    for decision in (_DECISIONS if "approval_id" in op[1] else _DECISIONS[:1])
]


@pytest.mark.parametrize(("operation", "decision"), _TENANCY_CASES)
async def test_another_owners_thread_or_approval_is_indistinguishable_from_none(
    api: Api, intruder: Api, db: Database, operation: tuple[str, str], decision: dict[str, Any]
) -> None:
    thread_id, proposal = await api.list_then_propose()
    approval_id = proposal["data"]["approval_id"]

    method, url, body = _request(operation, thread_id, approval_id)
    if "approval_id" in operation[1]:
        body = decision
    foreign = await intruder.client.request(method, url, json=body, headers=intruder.auth)
    method, url, body = _request(operation, _UNKNOWN_THREAD, _UNKNOWN_APPROVAL)
    if "approval_id" in operation[1]:
        body = decision
    missing = await intruder.client.request(method, url, json=body, headers=intruder.auth)

    assert foreign.status_code == missing.status_code == 404
    assert foreign.headers["content-type"] == missing.headers["content-type"] == "application/json"
    anonymized = re.sub(r"'[^']*'", "'…'", foreign.json()["message"])
    assert anonymized == re.sub(r"'[^']*'", "'…'", missing.json()["message"])
    assert foreign.json()["code"] == "not_found"

    # Nothing of the owner's changed, and the intruder sees nothing of it.
    pending = (await api.get("/v1/approvals")).json()["approvals"]
    assert [p["approval_id"] for p in pending] == [approval_id]
    detail = (await api.get(f"/v1/threads/{thread_id}")).json()
    assert [m["content"] for m in detail["messages"] if m["role"] == "user"] == ["what's on my calendar today?"]
    assert (await intruder.get("/v1/threads")).json() == {"threads": []}
    assert (await intruder.get("/v1/approvals")).json() == {"approvals": []}
    async with all_rows(db) as conn:  # a scope that sees both owners' rows: no scope would show 0 anyway
        cur = await conn.execute("SELECT count(*) AS n FROM effects WHERE owner_id IN (%s, %s)",
                                 (api.owner, intruder.owner))
        row = await cur.fetchone()
    assert row is not None and row["n"] == 0


# ---- rate limit ---------------------------------------------------------------------------------

async def test_the_rate_limit_is_per_principal_and_ignores_client_headers(settings: Settings, db: Database) -> None:
    tight = settings.model_copy(update={"rate_limit_burst": 3, "rate_limit_per_minute": 1})
    first, second = "o_rl_" + secrets.token_hex(6), "o_rl_" + secrets.token_hex(6)
    tokens = {owner: await issue_token(db, owner) for owner in (first, second)}
    with serve(tight, clock=Clock(NOW)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            def headers(owner: str, n: int) -> dict[str, str]:
                return {"Authorization": f"Bearer {tokens[owner]}", "X-Forwarded-For": f"203.0.113.{n}",
                        "X-Real-IP": f"198.51.100.{n}"}

            statuses = [(await client.get("/v1/approvals", headers=headers(first, n))).status_code for n in range(5)]
            assert statuses == [200, 200, 200, 429, 429]
            limited = await client.get("/v1/threads", headers=headers(first, 9))
            assert limited.status_code == 429 and limited.json()["code"] == "rate_limited"
            assert int(limited.headers["retry-after"]) >= 1
            assert (await client.get("/v1/approvals", headers=headers(second, 1))).status_code == 200
            assert [(await client.get("/healthz")).status_code for _ in range(5)] == [200] * 5
            unauthenticated = await client.get("/v1/approvals")
            assert unauthenticated.status_code == 401  # no token: refused before any budget is spent
    # The run of three refusals is one record, of the owner who was refused.
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT owner_id, stage, reason, code FROM audit_log WHERE owner_id = ANY(%s) AND stage = 'http'",
            ([first, second],))
        assert await cur.fetchall() == [{"owner_id": first, "stage": "http", "reason": "rate_limited",
                                         "code": "rate_limited"}]
