"""One exception handler for the API: every failure becomes an :class:`~web.schemas.ErrorBody`.

The error taxonomy (``policies.errors``, with each code's status in ``HTTP_STATUS``) becomes
the API's answers here. ``permission_denied`` answers 404 like ``not_found``: over HTTP the only thing it can mean is
"not yours", and one owner must not learn that another's thread or approval exists.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from tollgate.policies.errors import HTTP_STATUS, InvalidArgs, TollgateError
from tollgate.web.hub import TurnStopped
from tollgate.web.schemas import ApiErrorCode, ErrorBody

__all__ = ["STATUS_BY_CODE", "InsufficientScope", "RateLimited", "Unauthenticated", "documented",
           "install_error_handlers"]

_log = logging.getLogger("tollgate.web")

STATUS_BY_CODE: Final = HTTP_STATUS
"""HTTP status per error code."""


class Unauthenticated(Exception):
    """No bearer token, or one that maps to no owner (the two are not told apart)."""

    code: Final = "unauthenticated"

    def __init__(self) -> None:
        super().__init__("a valid bearer token is required")


class InsufficientScope(Exception):
    """The credential is valid but does not grant what this route group requires (403)."""

    code: Final = "insufficient_scope"

    def __init__(self, required: list[str]) -> None:
        self.required = required
        super().__init__(f"this route needs the scope(s) {' '.join(required)}")


class RateLimited(Exception):
    """The principal spent its request budget; ``retry_after`` seconds until the next request."""

    code: Final = "rate_limited"

    def __init__(self, retry_after: float) -> None:
        self.retry_after = retry_after
        super().__init__(f"too many requests; retry in {math.ceil(retry_after)} s")


def _body(code: ApiErrorCode, message: str, status: int, *, violations: list[str] | None = None,
          headers: Mapping[str, str] | None = None) -> JSONResponse:
    body = ErrorBody(code=code, message=message, violations=violations or [])
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def _location(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(part) for part in loc)


_RETRY_UNAVAILABLE: Final = "5"
"""Seconds a client is asked to wait before it retries a 503 (a database or provider outage)."""


async def _tollgate_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, TollgateError)
    violations = exc.violations if isinstance(exc, InvalidArgs) else None
    status = STATUS_BY_CODE.get(exc.code, 503)
    return _body(exc.code, exc.message, status, violations=violations,
                 headers={"Retry-After": _RETRY_UNAVAILABLE} if status == 503 else None)


def _violation(error: Mapping[str, Any]) -> str:
    loc = tuple(error.get("loc", ()))
    if error.get("type") == "json_invalid":
        # pydantic's location is the character offset; its context says what the parser expected.
        reason = str(error.get("ctx", {}).get("error", "not JSON"))
        at = f", at character {loc[1] + 1}" if len(loc) > 1 and isinstance(loc[1], int) else ""
        return f"the request body is not valid JSON ({reason}{at})"
    return f"{_location(loc)}: {error.get('msg', 'invalid')}"


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # Never echo the input: a request may carry a secret in the field that failed.
    violations = [_violation(e) for e in exc.errors()]
    message = violations[0] if len(violations) == 1 else f"invalid request: {len(violations)} violations"
    return _body("invalid_args", message, 422, violations=violations)


async def _unauthenticated(_request: Request, exc: Exception) -> JSONResponse:
    return _body("unauthenticated", str(exc), 401, headers={"WWW-Authenticate": "Bearer"})


async def _insufficient_scope(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, InsufficientScope)
    # RFC 6750 section 3: the error and the scope the client must ask its provider for.
    challenge = f'Bearer error="insufficient_scope", scope="{" ".join(exc.required)}"'
    return _body("insufficient_scope", str(exc), 403, headers={"WWW-Authenticate": challenge})


async def _rate_limited(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RateLimited)
    return _body("rate_limited", str(exc), 429, headers={"Retry-After": str(math.ceil(exc.retry_after))})


def _allowed(request: Request) -> str:
    """Every method the request's path answers to, from the API's own document (Starlette's 405
    names only the first matching route's)."""
    methods: set[str] = set()
    for template, operations in request.app.openapi().get("paths", {}).items():
        if compile_path(template)[0].match(request.url.path):
            methods |= {method.upper() for method in operations}
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:  # a body that is not even JSON: as invalid as any other malformed request
        return _body("invalid_args", "invalid request: the body could not be parsed", 422)
    code: ApiErrorCode = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "invalid_args")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed(request)
    return _body(code, str(exc.detail), exc.status_code, headers=headers)


async def _stopped(_request: Request, exc: Exception) -> JSONResponse:
    return _body("cancelled", str(exc), 409)


async def _database_down(_request: Request, exc: Exception) -> JSONResponse:
    _log.warning("database unavailable: %s", type(exc).__name__)
    return _body("unavailable", "the database is unavailable", 503, headers={"Retry-After": _RETRY_UNAVAILABLE})


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that turn every failure into an :class:`ErrorBody`."""
    app.add_exception_handler(TollgateError, _tollgate_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Unauthenticated, _unauthenticated)
    app.add_exception_handler(InsufficientScope, _insufficient_scope)
    app.add_exception_handler(RateLimited, _rate_limited)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(OperationalError, _database_down)
    app.add_exception_handler(TurnStopped, _stopped)


_DESCRIPTIONS: Final[dict[int, str]] = {
    401: "No bearer token, or an unknown, revoked, expired or otherwise invalid one (`unauthenticated`).",
    403: "The token is valid but lacks a scope this route group requires (`insufficient_scope`).",
    404: "No such thread, turn or approval for this caller: another owner's is indistinguishable from none.",
    409: "The approval is no longer pending (decided, superseded) or its token no longer matches; or the turn was stopped (`cancelled`).",
    422: "The request broke its schema (`invalid_args`, with `violations`).",
    429: "The caller's request budget is spent (`rate_limited`); retry after `Retry-After` seconds.",
    503: "The database or another collaborator is unavailable (`unavailable`, `transient`).",
}
_HEADERS: Final[dict[int, dict[str, Any]]] = {
    401: {"WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}},
    429: {"Retry-After": {"description": "Seconds until a request is allowed again.", "schema": {"type": "integer"}}},
    503: {"Retry-After": {"description": "Seconds to wait before trying again.", "schema": {"type": "integer"}}},
}


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the given error statuses, all with the :class:`ErrorBody` schema."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {"model": ErrorBody, "description": _DESCRIPTIONS[status]}
        if status in _HEADERS:
            entry["headers"] = _HEADERS[status]
        out[status] = entry
    return out
