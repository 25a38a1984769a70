"""No 5xx from input: NUL and unpaired surrogates in any string the server stores are a 422, and
the API's own document says so (every such string's schema has a pattern that refuses them).

PostgreSQL's ``text`` cannot hold NUL and an unpaired surrogate is not UTF-8: before, a NUL in a
thread's new title or in a thread search reached the database and came back as a 500.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tollgate.server import create_app
from tests.server_harness import Api

_SPEC: dict[str, Any] = create_app().openapi()
_BAD = {"nul": "before\x00after", "surrogate": "before\ud800after"}


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref:
        return _resolve(_SPEC["components"]["schemas"][ref.rsplit("/", 1)[-1]])
    return schema


def _strings(schema: dict[str, Any], where: str, seen: frozenset[str] = frozenset()) -> list[tuple[str, dict[str, Any]]]:
    """Every string schema reachable in ``schema`` (object keys too), with where it is."""
    ref = schema.get("$ref")
    if ref in seen:
        return []  # a recursive schema: its strings were listed the first time round
    seen = seen | {ref} if ref else seen
    schema = _resolve(schema)
    found: list[tuple[str, dict[str, Any]]] = []
    for key in ("anyOf", "oneOf", "allOf"):
        for i, part in enumerate(schema.get(key, [])):
            found += _strings(part, f"{where}|{i}", seen)
    if schema.get("type") == "string":
        found.append((where, schema))
    for name, prop in (schema.get("properties") or {}).items():
        found += _strings(prop, f"{where}.{name}", seen)
    if isinstance(schema.get("items"), dict):
        found += _strings(schema["items"], f"{where}[]", seen)
    if schema.get("type") == "object" and (schema.get("additionalProperties", True) is not False
                                           or schema.get("patternProperties")):
        found.append((f"{where}{{key}}", {"type": "string", **schema.get("propertyNames", {})}))
    if isinstance(schema.get("additionalProperties"), dict):
        found += _strings(schema["additionalProperties"], f"{where}{{value}}", seen)
    return found


def _inputs() -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for path, operations in _SPEC["paths"].items():
        for method, operation in operations.items():
            name = f"{method.upper()} {path}"
            for parameter in operation.get("parameters", []):
                out += _strings(parameter["schema"], f"{name} {parameter['in']}:{parameter['name']}")
            for media in (operation.get("requestBody") or {}).get("content", {}).values():
                out += _strings(media["schema"], f"{name} body")
    return out


@pytest.mark.parametrize(("where", "schema"), _inputs(), ids=[w for w, _ in _inputs()])
def test_every_string_the_api_takes_says_it_refuses_nul_and_unpaired_surrogates(where: str, schema: dict[str, Any]) -> None:
    if "enum" in schema or "const" in schema:
        return  # a closed set of values
    assert "pattern" in schema, f"{where}: no pattern says what is refused"
    pattern = re.compile(schema["pattern"])
    for kind, bad in _BAD.items():
        assert not pattern.search(bad), f"{where}: its pattern admits {kind}"
        assert not pattern.search(bad.replace("before", "").replace("after", "")), f"{where}: admits a lone {kind}"


@pytest.mark.parametrize("kind", sorted(_BAD))
async def test_nul_and_unpaired_surrogates_in_stored_fields_are_422_and_leave_the_approval_pending(
    api: Api, kind: str
) -> None:
    bad = _BAD[kind]
    thread_id, proposal = await api.list_then_propose()
    approval_id = proposal["data"]["approval_id"]
    h = {**api.auth, "Content-Type": "application/json"}

    async def send(method: str, path: str, body: dict[str, Any]) -> Any:
        # json.dumps escapes an unpaired surrogate as \ud800, as any client's JSON encoder may send it.
        return await api.client.request(method, path, content=json.dumps(body).encode(), headers=h)

    refused = [
        await send("PATCH", f"/v1/threads/{thread_id}", {"title": bad}),
        await send("POST", "/v1/chat", {"message": bad, "thread_id": thread_id}),
        await send("POST", f"/v1/approvals/{approval_id}/decision", {"type": "reject", "message": bad}),
        await send("POST", f"/v1/approvals/{approval_id}/decision", {"type": "edit", "args": {"event_id": bad}}),
        await send("POST", f"/v1/approvals/{approval_id}/decision", {"type": "edit", "args": {"nested": [{bad: "x"}]}}),
        await send("PATCH", "/v1/me", {"display_name": bad}),
        await send("PUT", "/v1/me/accounts/caldav", {"url": f"https://cal.example/{bad}", "username": "u",
                                                     "password": bad}),
        await send("PUT", "/v1/me/accounts/imap", {
            "imap_url": "imaps://mail.example", "smtp_url": "smtps://mail.example", "username": bad,
            "password": "p", "address": f"{bad}@example.com"}),
        await send("POST", "/v1/background-runs", {"instruction": bad}),
    ]
    if kind == "nul":  # a URL cannot carry an unpaired surrogate (it is not UTF-8); NUL it can
        refused.append(await api.client.get("/v1/threads", params={"q": bad}, headers=api.auth))
    for response in refused:
        assert response.status_code == 422, (response.request.method, response.request.url.path, response.text)
        assert response.json()["code"] == "invalid_args"
    pending = await api.get("/v1/approvals")
    assert [a["approval_id"] for a in pending.json()["approvals"]] == [approval_id]
    detail = await api.get(f"/v1/threads/{thread_id}")
    assert detail.status_code == 200 and "\x00" not in detail.text
