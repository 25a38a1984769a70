"""schemathesis against the live server with a valid token: no 5xx, no undocumented status or shape.

Driven through schemathesis's Python API (``APIOperation.as_strategy`` + hypothesis), one
test per operation and generation mode: its pytest plugin's fixture loader does not support
pytest 9 yet. Each operation also runs against the owner's real thread and approval, so the
200 and 409 paths are exercised, not only 404s for random ids.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from schemathesis.checks import positive_data_acceptance
from hypothesis import HealthCheck, Phase, given, settings

from tollgate.server import create_app
from tests.server_harness import Api, LiveServer

_SPEC: dict[str, Any] = create_app().openapi()  # building the schema does no I/O
_OPERATIONS = sorted((path, method) for path, ops in _SPEC["paths"].items() for method in ops)
_MODES = {"positive": schemathesis.GenerationMode.POSITIVE, "negative": schemathesis.GenerationMode.NEGATIVE}
_EXAMPLES = 10
_CHECKED_ELSEWHERE = "x-tollgate-checked-elsewhere"


@pytest.fixture
def api_schema(live_server: LiveServer, api: Api) -> schemathesis.BaseSchema:
    """The server's own OpenAPI document, loaded over HTTP, with the owner's token for its bearer scheme."""
    config = schemathesis.Config.from_dict({"auth": {"openapi": {"HTTPBearer": {"bearer": api.token}}}})
    return schemathesis.openapi.from_url(f"{live_server.url}/openapi.json", config=config)


@pytest.fixture
async def own_ids(api: Api) -> dict[str, str]:
    """A real thread of the caller, with a pending approval."""
    thread_id, proposal = await api.list_then_propose()
    return {"thread_id": thread_id, "approval_id": proposal["data"]["approval_id"]}


def _has_inputs(path: str, method: str) -> bool:
    operation = _SPEC["paths"][path][method]
    return bool(operation.get("parameters") or operation.get("requestBody"))


_CASES = [
    pytest.param(path, method, mode, ids, id=f"{method.upper()} {path} {mode} {ids}")
    for path, method in _OPERATIONS
    # Negative data needs something to break: a parameter or a body.
    for mode in (sorted(_MODES) if _has_inputs(path, method) else ["positive"])
    for ids in (["generated-ids", "own-ids"] if "{thread_id}" in path or "{approval_id}" in path else ["generated-ids"])
]


@pytest.mark.parametrize(("path", "method", "mode", "ids"), _CASES)
def test_the_api_keeps_its_documented_contract(
    api_schema: schemathesis.BaseSchema, api: Api, request: pytest.FixtureRequest, path: str, method: str,
    mode: str, ids: str,
) -> None:
    operation = api_schema[path][method]
    path_parameters: dict[str, Any] | None = None
    if ids == "own-ids":
        own_ids: dict[str, str] = request.getfixturevalue("own_ids")
        path_parameters = {name: value for name, value in own_ids.items() if "{" + name + "}" in path}
    strategy = operation.as_strategy(_MODES[mode], path_parameters=path_parameters)

    @given(case=strategy)
    @settings(
        max_examples=_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,  # the same examples on every run: CI must not flake on a lucky draw
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )
    def check(case: schemathesis.Case[Any]) -> None:
        statuses.append(case.call_and_validate(excluded_checks=excluded).status_code)

    # An operation that checks valid data against something outside its schema (an account's
    # login, tried on its server) documents that it may refuse it: 422 is its answer then.
    excluded = [positive_data_acceptance] if _SPEC["paths"][path][method].get(_CHECKED_ELSEWHERE) else []

    statuses: list[int] = []
    check()
    if mode == "positive":  # the token really was sent: valid requests are never refused as unauthenticated
        assert statuses and 401 not in statuses
