"""OIDC access tokens over real HTTP: a loopback identity provider (discovery + JWKS) with keys
made by the test, and Tollgate's server configured with ``TOLLGATE_AUTH=oidc``.

Every attack on the token is tried: expired, not yet valid, wrong issuer or audience, an unknown
key then a rotation, ``alg=none``, HS256 signed with the provider's public key (key confusion), a
token of another owner, missing scopes; and the keys are only ever fetched through the egress gate.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tollgate.tools.perimeter.egress_transport import EgressClient
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database
from tollgate.graph.store.owner_scope import owner_transaction
from tollgate.policies.egress import EgressPolicy
from tests.harness import Clock
from tests.server_harness import Api, LiveServer, serve
from tests.webserver import serve as serve_loopback
from tollgate.tools.demo import seed_demo
from tollgate.web.identity.oidc import JwksKeys, OidcAuthenticator

_AUDIENCE = "tollgate-api"


@dataclass
class Provider:
    """A loopback OpenID provider: its issuer URL, signing keys and what it was asked."""

    issuer: str = ""
    keys: dict[str, Any] = field(default_factory=dict)  # kid -> private key
    published: list[str] = field(default_factory=list)  # the kids its JWKS lists
    jwks_hits: int = 0
    jwks_down: bool = False  # its key endpoint answers 503, after jwks_delay seconds
    jwks_delay: float = 0.0

    def jwks(self) -> dict[str, Any]:
        out = []
        for kid in self.published:
            key = self.keys[kid]
            algorithm = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
            entry = json.loads(algorithm.to_jwk(key.public_key()))
            out.append(entry | {"kid": kid, "use": "sig"})
        return {"keys": out}

    def token(self, sub: str, *, kid: str = "rsa-1", alg: str = "RS256", **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.issuer, "aud": _AUDIENCE, "sub": sub, "iat": now, "exp": now + 300} | claims
        return jwt.encode(body, self.keys[kid], algorithm=alg, headers={"kid": kid})

    def public_pem(self, kid: str = "rsa-1") -> bytes:
        return self.keys[kid].public_key().public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(header: dict[str, Any], claims: dict[str, Any], sign: Any = None) -> str:
    """A JWT made by hand, as an attacker would: PyJWT refuses to make these."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = _b64(sign(signing_input.encode())) if sign else ""
    return f"{signing_input}.{signature}"


@pytest.fixture(scope="module")
async def provider() -> AsyncIterator[Provider]:
    state = Provider(keys={
        "rsa-1": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "rsa-2": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "ec-1": ec.generate_private_key(ec.SECP256R1()),
    }, published=["rsa-1", "ec-1"])

    async def discovery(request: Request) -> JSONResponse:
        return JSONResponse({"issuer": state.issuer, "jwks_uri": f"{state.issuer}/jwks"})

    async def jwks(request: Request) -> JSONResponse:
        state.jwks_hits += 1
        if state.jwks_delay:
            await asyncio.sleep(state.jwks_delay)
        if state.jwks_down:
            return JSONResponse({"error": "down"}, status_code=503)
        return JSONResponse(state.jwks())

    app = Starlette(routes=[Route("/.well-known/openid-configuration", discovery), Route("/jwks", jwks)])
    async with serve_loopback(app) as port:
        state.issuer = f"http://127.0.0.1:{port}"
        yield state


def _oidc_settings(settings: Settings, provider: Provider, **more: Any) -> Settings:
    return settings.model_copy(update={
        "auth": "oidc", "oidc_issuer": provider.issuer, "oidc_audience": _AUDIENCE,
        "egress_allow_networks": ["127.0.0.0/8"], "oidc_jwks_refetch_seconds": 0.0,
        "rate_limit_burst": 100_000, "rate_limit_per_minute": 1_000_000,
        "auth_scopes": {"approvals": ["tollgate.approve"], "admin": ["tollgate.admin"]},
    } | more)


@pytest.fixture(scope="module")
def oidc_server(settings: Settings, provider: Provider) -> Iterator[LiveServer]:
    from tests.conftest import NOW

    with serve(_oidc_settings(settings, provider), clock=Clock(NOW)) as server:
        yield server


async def _me(server: LiveServer, token: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        return await client.get("/v1/me", headers={"Authorization": f"Bearer {token}"})


async def test_a_valid_token_is_its_owner_with_the_claims_as_profile_defaults(
    oidc_server: LiveServer, provider: Provider, owner: str
) -> None:
    token = provider.token(owner, name="Ada Lovelace", zoneinfo="Asia/Tokyo", locale="en-GB", scope="openid profile")
    response = await _me(oidc_server, token)
    assert response.status_code == 200, response.text
    me = response.json()
    assert me["owner_id"] == owner and me["display_name"] == "Ada Lovelace"
    assert me["timezone"] == "Asia/Tokyo" and me["locale"] == "en-GB"
    assert me["scopes"] == ["openid", "profile"]
    ec_token = provider.token(owner, kid="ec-1", alg="ES256")
    assert (await _me(oidc_server, ec_token)).status_code == 200  # an EC key of the same provider


@pytest.mark.parametrize(
    ("claims", "why"),
    [
        ({"exp": int(time.time()) - 3600}, "expired"),
        ({"nbf": int(time.time()) + 3600}, "not yet valid"),
        ({"iss": "https://evil.example"}, "another issuer"),
        ({"aud": "some-other-api"}, "another audience"),
        ({"sub": "bad owner id!"}, "an owner id Tollgate cannot take"),
    ],
)
async def test_a_token_that_fails_a_check_is_401(
    oidc_server: LiveServer, provider: Provider, owner: str, claims: dict[str, Any], why: str
) -> None:
    claims = dict(claims)
    response = await _me(oidc_server, provider.token(claims.pop("sub", owner), **claims))
    assert response.status_code == 401, why
    assert response.json()["code"] == "unauthenticated"
    assert "expired" not in response.text and "audience" not in response.text  # which check failed stays unsaid


async def test_the_clock_skew_allows_a_token_just_expired(oidc_server: LiveServer, provider: Provider, owner: str) -> None:
    response = await _me(oidc_server, provider.token(owner, exp=int(time.time()) - 10))  # within the 30 s leeway
    assert response.status_code == 200


async def test_alg_none_and_hs256_with_the_public_key_are_refused(
    oidc_server: LiveServer, provider: Provider, owner: str
) -> None:
    claims = {"iss": provider.issuer, "aud": _AUDIENCE, "sub": owner, "exp": int(time.time()) + 300}
    none = _unsigned({"alg": "none", "typ": "JWT", "kid": "rsa-1"}, claims)
    assert (await _me(oidc_server, none)).status_code == 401
    pem = provider.public_pem()
    confused = _unsigned({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}, claims,
                         lambda data: hmac.new(pem, data, hashlib.sha256).digest())
    assert (await _me(oidc_server, confused)).status_code == 401
    wrong_family = provider.token(owner, kid="rsa-1", alg="RS256")
    forged_kid = wrong_family.replace(wrong_family.split(".")[0], _b64(json.dumps(
        {"alg": "ES256", "typ": "JWT", "kid": "rsa-1"}).encode()))
    assert (await _me(oidc_server, forged_kid)).status_code == 401  # an RSA key never verifies an ES256 claim


async def test_an_unknown_key_is_refused_until_the_provider_publishes_it(
    oidc_server: LiveServer, provider: Provider, owner: str
) -> None:
    rotated = provider.token(owner, kid="rsa-2")
    assert (await _me(oidc_server, rotated)).status_code == 401  # not published: refetched, still unknown
    provider.published.append("rsa-2")  # the provider rotates its keys
    try:
        assert (await _me(oidc_server, rotated)).status_code == 200
    finally:
        provider.published.remove("rsa-2")


async def test_another_owners_token_sees_nothing_of_the_first_owners(
    oidc_server: LiveServer, provider: Provider, db: Database, owner: str
) -> None:
    from tests.conftest import NOW

    async with owner_transaction(db.pool, owner) as conn:
        await seed_demo(conn, owner, NOW, "Europe/Paris")
    mine = {"Authorization": f"Bearer {provider.token(owner)}", "Accept": "application/json"}
    theirs = {"Authorization": f"Bearer {provider.token(owner + '-other')}"}
    async with httpx.AsyncClient(base_url=oidc_server.url, timeout=60) as client:
        chat = await client.post("/v1/chat", headers=mine, json={"message": "what's on my calendar today?"})
        assert chat.status_code == 200, chat.text
        thread = chat.json()["thread_id"]
        assert (await client.get(f"/v1/threads/{thread}", headers=mine)).status_code == 200
        assert (await client.get(f"/v1/threads/{thread}", headers=theirs)).status_code == 404
        assert (await client.get("/v1/threads", headers=theirs)).json() == {"threads": []}


async def test_the_sse_streams_take_the_providers_tokens(
    oidc_server: LiveServer, provider: Provider, db: Database, owner: str
) -> None:
    """A chat streamed as Server-Sent Events, and the thread's event log replayed, with a provider's token."""
    from tests.conftest import NOW

    async with owner_transaction(db.pool, owner) as conn:
        await seed_demo(conn, owner, NOW, "Europe/Paris")
    token = provider.token(owner)
    stream = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    async with httpx.AsyncClient(base_url=oidc_server.url, timeout=60) as client:
        chat = await client.post("/v1/chat", headers=stream, json={"message": "what's on my calendar today?"})
        assert chat.status_code == 200 and chat.headers["content-type"].startswith("text/event-stream")
        assert "event: message_complete" in chat.text
        thread = next(line.split('"thread_id":"')[1].split('"')[0] for line in chat.text.splitlines()
                      if '"thread_id":"' in line)
        replay = await client.get(f"/v1/threads/{thread}/events", headers=stream)
        assert replay.status_code == 200 and "event: message_complete" in replay.text
        other = {"Authorization": f"Bearer {provider.token(owner + '-other')}", "Accept": "text/event-stream"}
        assert (await client.get(f"/v1/threads/{thread}/events", headers=other)).status_code == 404
        assert (await client.get(f"/v1/threads/{thread}/events", headers={"Accept": "text/event-stream"})).status_code == 401


async def test_a_route_group_refuses_a_token_without_its_scope(
    oidc_server: LiveServer, provider: Provider, owner: str
) -> None:
    async with httpx.AsyncClient(base_url=oidc_server.url, timeout=30) as client:
        plain = {"Authorization": f"Bearer {provider.token(owner, scope='openid')}"}
        refused = await client.get("/v1/approvals", headers=plain)
        assert refused.status_code == 403
        assert refused.json()["code"] == "insufficient_scope"
        assert 'scope="tollgate.approve"' in refused.headers["www-authenticate"]
        assert (await client.get("/v1/threads", headers=plain)).status_code == 200  # chat needs no scope here
        granted = {"Authorization": f"Bearer {provider.token(owner, scope='openid tollgate.approve')}"}
        assert (await client.get("/v1/approvals", headers=granted)).status_code == 200
        listed = {"Authorization": f"Bearer {provider.token(owner, scp=['tollgate.approve'])}"}  # a list claim
        assert (await client.get("/v1/approvals", headers=listed)).status_code == 200


async def test_the_admin_routes_serve_only_a_token_naming_the_admin_scope(
    oidc_server: LiveServer, provider: Provider, owner: str
) -> None:
    async with httpx.AsyncClient(base_url=oidc_server.url, timeout=30) as client:
        plain = {"Authorization": f"Bearer {provider.token(owner, scope='openid tollgate.approve')}"}
        refused = await client.get("/v1/admin/audit", headers=plain)
        assert refused.status_code == 403 and refused.json()["code"] == "insufficient_scope"
        admin = {"Authorization": f"Bearer {provider.token(owner, scope='openid tollgate.admin')}"}
        verdict = await client.get("/v1/admin/audit", headers=admin)
        assert verdict.status_code == 200, verdict.text
        assert verdict.json()["ok"] is True and verdict.json()["rows"] > 0


async def test_a_stored_token_is_never_an_operator(api: Api) -> None:
    """Without admin scopes configured the admin routes refuse everyone; a stored token is one owner's."""
    for path in ("/v1/admin/audit", "/metrics"):
        refused = await api.client.get(path, headers=api.auth)
        assert refused.status_code == 403 and refused.json()["code"] == "insufficient_scope", path


async def test_the_metrics_are_served_to_the_admin_scope_only(
    oidc_server: LiveServer, provider: Provider, owner: str
) -> None:
    """``GET /metrics`` is an operator's route: a token without the admin scope is refused, one
    with it reads the Prometheus text (parsed), the database gauges read at the scrape."""
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient(base_url=oidc_server.url, timeout=30) as client:
        assert (await client.get("/metrics")).status_code == 401
        plain = {"Authorization": f"Bearer {provider.token(owner, scope='openid tollgate.approve')}"}
        assert (await client.get("/metrics", headers=plain)).status_code == 403
        admin = {"Authorization": f"Bearer {provider.token(owner, scope='openid tollgate.admin')}"}
        page = await client.get("/metrics", headers=admin)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(page.text)}
    assert {"tollgate_turns", "tollgate_approvals", "tollgate_background_runs", "tollgate_db_pool_connections",
            "tollgate_model_call_seconds", "tollgate_tool_call_seconds", "tollgate_lease_wait_seconds"} <= families.keys()
    pool = {s.labels["state"]: s.value for s in families["tollgate_db_pool_connections"].samples}
    assert pool.keys() == {"in_use", "idle", "waiting", "max"} and pool["max"] == oidc_server.settings.pool_max_size
    assert {s.labels["state"] for s in families["tollgate_approvals"].samples} >= {"pending", "executed", "expired"}


async def test_stored_tokens_do_not_work_when_oidc_is_configured(
    oidc_server: LiveServer, db: Database, owner: str
) -> None:
    from tollgate.web.auth import issue_token

    assert (await _me(oidc_server, await issue_token(db, owner))).status_code == 401


# --- the key cache, on its own ----------------------------------------------------------------


def _keys(provider: Provider, *, refetch: float, jwks_url: str | None = None) -> JwksKeys:
    policy = EgressPolicy.build(allow_hosts=[provider.issuer.removeprefix("http://")], allow_networks=["127.0.0.0/8"])
    return JwksKeys(EgressClient(policy), issuer=provider.issuer, jwks_url=jwks_url, ttl=300, refetch=refetch)


async def test_forged_kids_do_not_turn_into_requests_to_the_provider(provider: Provider) -> None:
    keys = _keys(provider, refetch=60)
    before = provider.jwks_hits
    assert await keys.key("rsa-1") is not None
    for n in range(20):
        assert await keys.key(f"forged-{n}") is None
    assert provider.jwks_hits - before == 1  # one fetch; unknown kids wait for the refetch interval


async def test_keys_come_only_from_the_issuers_host_through_the_egress_gate(provider: Provider) -> None:
    elsewhere = _keys(provider, refetch=0, jwks_url="http://localhost:9/jwks")  # not the issuer's host
    assert await elsewhere.key("rsa-1") is None


async def test_an_email_owner_must_be_verified(settings: Settings, provider: Provider) -> None:
    authenticator = OidcAuthenticator.from_settings(_oidc_settings(settings, provider, oidc_owner_claim="email"))
    unverified = provider.token("someone", email="ada@example.com", email_verified=False)
    assert await authenticator.authenticate({"authorization": f"Bearer {unverified}"}) is None
    verified = provider.token("someone", email="ada@example.com", email_verified=True)
    identity = await authenticator.authenticate({"authorization": f"Bearer {verified}"})
    assert identity is not None and identity.owner_id == "ada@example.com"


async def test_studio_takes_the_providers_tokens_too(
    settings: Settings, provider: Provider, db: Database, owner: str, tmp_path: Path
) -> None:
    """``langgraph dev`` with ``TOLLGATE_AUTH=oidc``: the same authenticator as the HTTP API."""
    from langgraph_sdk import get_client
    from langgraph_sdk.errors import AuthenticationError

    from tollgate.graph._env import child_environment, stop_group
    from tests.children import free_port, wait_answering
    from tollgate.graph.services import utc_now
    from tests.test_studio import _LANGGRAPH, _ROOT

    if not _LANGGRAPH.exists():
        pytest.skip("run `make setup-studio`") if os.environ.get("CI") != "true" else pytest.fail("no .venv-studio")
    async with owner_transaction(db.pool, owner) as conn:
        await seed_demo(conn, owner, utc_now(), "UTC")  # langgraph dev has the real clock only
    env = child_environment(settings, TOLLGATE_DEFAULT_TIMEZONE="UTC",  # the zone the data is placed in
                            TOLLGATE_AUTH="oidc", TOLLGATE_OIDC_ISSUER=provider.issuer,
                            TOLLGATE_OIDC_AUDIENCE=_AUDIENCE, TOLLGATE_EGRESS_ALLOW_NETWORKS='["127.0.0.0/8"]')
    port, log = free_port(), tmp_path / "langgraph-dev.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(_LANGGRAPH), "dev", "--config", str(_ROOT / "langgraph.json"), "--host", "127.0.0.1",
             "--port", str(port), "--no-browser", "--no-reload"],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_answering(f"{url}/ok", proc, log, what="langgraph dev")
        client = get_client(url=url, headers={"Authorization": f"Bearer {provider.token(owner)}"})
        thread = await client.threads.create()
        result = await client.runs.wait(thread["thread_id"], "tollgate",
                                        input={"messages": [{"role": "user", "content": "what's on my calendar today?"}]})
        assert isinstance(result, dict) and "Lunch with Sam" in str(result.get("reply")), result
        await client.aclose()
        stranger = get_client(url=url, headers={"Authorization": f"Bearer {provider.token(owner, aud='other-api')}"})
        with pytest.raises(AuthenticationError):
            await stranger.threads.create()
        await stranger.aclose()
    finally:
        stop_group(proc)


@pytest.mark.parametrize(("header", "claims", "why"), [
    ({}, {"nonce": "n-0S6_WzA2Mj"}, "an ID token's nonce"),
    ({}, {"at_hash": "77QmUPtjPfzWtF2AnpK9RQ"}, "an ID token's at_hash"),
    ({"typ": "id_token+jwt"}, {}, "a typ that is not an access token's"),
    ({}, {"exp": str(int(time.time()) + 300)}, "exp as a string of digits"),
    ({}, {"iat": str(int(time.time()))}, "iat as a string of digits"),
    ({}, {"nbf": True}, "nbf as a boolean"),
])
async def test_id_tokens_and_time_claims_that_are_not_numbers_are_refused(
    settings: Settings, provider: Provider, owner: str, header: dict[str, Any], claims: dict[str, Any], why: str
) -> None:
    authenticator = OidcAuthenticator.from_settings(_oidc_settings(settings, provider))
    now = int(time.time())
    body = {"iss": provider.issuer, "aud": _AUDIENCE, "sub": owner, "iat": now, "exp": now + 300} | claims
    token = jwt.encode(body, provider.keys["rsa-1"], algorithm="RS256", headers={"kid": "rsa-1"} | header)
    assert await authenticator.authenticate({"authorization": f"Bearer {token}"}) is None, why
    clean = {"iss": provider.issuer, "aud": _AUDIENCE, "sub": owner, "iat": now, "exp": now + 300}
    for typ in ("at+jwt", "application/at+jwt", "JWT"):  # access tokens as providers send them still pass
        good = jwt.encode(clean, provider.keys["rsa-1"], algorithm="RS256", headers={"kid": "rsa-1", "typ": typ})
        assert await authenticator.authenticate({"authorization": f"Bearer {good}"}) is not None, typ


async def test_a_key_endpoint_that_is_down_costs_one_fetch_not_one_per_request(provider: Provider) -> None:
    """Once the cached keys are stale and the provider is down: six requests at once wait for one
    fetch (they once waited behind six, one after the other), the keys held keep serving, and no
    fetch is tried again until the backoff has passed."""
    now = [0.0]
    policy = EgressPolicy.build(mode="enforce", allow_hosts={provider.issuer.removeprefix("http://")},
                                allow_networks=["127.0.0.0/8"])
    keys = JwksKeys(EgressClient(policy), issuer=provider.issuer, jwks_url=None, ttl=60, refetch=0,
                    clock=lambda: now[0])
    assert await keys.key("rsa-1") is not None
    provider.jwks_down, provider.jwks_delay = True, 0.5
    try:
        now[0] = 61.0  # the cache ran out
        before, started = provider.jwks_hits, time.monotonic()
        found = await asyncio.gather(*(keys.key("rsa-1") for _ in range(6)))
        assert all(key is not None for key in found)  # the stale keys serve
        assert provider.jwks_hits - before == 1 and time.monotonic() - started < 2.0
        assert await keys.key("rsa-1") is not None and provider.jwks_hits - before == 1  # within the backoff
        now[0] = 63.0  # past the first backoff (1 s): one more try, then a longer backoff
        await keys.key("rsa-1")
        await keys.key("rsa-1")
        assert provider.jwks_hits - before == 2
    finally:
        provider.jwks_down, provider.jwks_delay = False, 0.0
