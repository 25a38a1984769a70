"""Tollgate's refusals as typed answers on ``langgraph dev`` (``http.app`` in ``langgraph.json``).

The platform answers an exception it does not know with a bare 500. This app adds no routes;
its one exception handler turns a :class:`~policies.errors.TollgateError` raised by the graph
(``update_state`` refused, another owner's thread, a thread busy past the wait) into the same
``{"code", "message"}`` body the HTTP API answers, with its status. The platform keeps a user
app's exception handlers and adds its own beside them.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse

from tollgate.policies.errors import HTTP_STATUS, TollgateError

__all__ = ["app"]


async def _refused(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, TollgateError)
    # Studio's caller is on their own thread (the authentication handlers scope every thread to
    # its owner), so a refusal there is said as one, not hidden as a missing item.
    status = 403 if exc.code == "permission_denied" else HTTP_STATUS.get(exc.code, 503)
    return JSONResponse(exc.to_dict(), status_code=status)


app = Starlette(exception_handlers={TollgateError: _refused})
"""The app ``langgraph.json`` names (``http.app``)."""
