"""Request limits: the headers' size, the body's size and the time a client may take to send it.

An ASGI middleware in front of every route, so nothing reads a request past its limits:

* headers larger than ``max_header_bytes`` in all are refused with **431** before any route runs;
* a body declared (``Content-Length``) or found larger than ``max_body_bytes`` is refused with
  **413**, read no further;
* a body that does not arrive within ``body_seconds`` (a client that declares one and sends it
  slowly, or never) is refused with **408**.

The body is read here, within those limits, then handed to the route as it arrived; what the
client sends after it (its disconnect) reaches the route as before. The answers carry the API's
error body (``{"code", "message", "violations"}``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

__all__ = ["RequestLimits"]

_Scope = dict[str, Any]
_Message = dict[str, Any]


def _answer(status: int, code: str, message: str) -> tuple[_Message, _Message]:
    body = json.dumps({"code": code, "message": message, "violations": []}).encode()
    start = {"type": "http.response.start", "status": status,
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                         (b"connection", b"close")]}
    return start, {"type": "http.response.body", "body": body}


class RequestLimits:
    """Refuses requests past the limits (431, 413, 408) before the app sees them."""

    _NO_LENGTH: Final = -1

    def __init__(self, app: Any, *, max_header_bytes: int, max_body_bytes: int, body_seconds: float) -> None:
        self.app = app
        self.max_header_bytes = max_header_bytes
        self.max_body_bytes = max_body_bytes
        self.body_seconds = body_seconds

    async def __call__(self, scope: _Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        if sum(len(k) + len(v) for k, v in headers) > self.max_header_bytes:
            await self._refuse(send, 431, "headers_too_large",
                               f"the request's headers are larger than {self.max_header_bytes} bytes")
            return
        declared = self._declared(headers)
        if declared > self.max_body_bytes:
            await self._refuse(send, 413, "body_too_large", f"the request body is larger than {self.max_body_bytes} bytes")
            return
        try:
            async with asyncio.timeout(self.body_seconds):
                first, chunks = await self._body(receive)
        except TimeoutError:
            await self._refuse(send, 408, "body_timeout",
                               f"the request body did not arrive within {self.body_seconds:g} s")
            return
        if first is None:
            await self._refuse(send, 413, "body_too_large", f"the request body is larger than {self.max_body_bytes} bytes")
            return
        replayed = False

        async def replay() -> _Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {**first, "body": b"".join(chunks), "more_body": False}
            return await receive()  # after the body: the client's disconnect, as the route expects

        await self.app(scope, replay, send)

    def _declared(self, headers: list[tuple[bytes, bytes]]) -> int:
        for key, value in headers:
            if key.lower() == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return self._NO_LENGTH
        return self._NO_LENGTH

    async def _body(self, receive: Any) -> tuple[_Message | None, list[bytes]]:
        """The body's messages joined (``None`` when it outgrew the limit); a disconnect ends it."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return message if message["type"] == "http.disconnect" else None, chunks
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None, chunks
            chunks.append(chunk)
            if not message.get("more_body", False):
                return message, chunks

    @staticmethod
    async def _refuse(send: Any, status: int, code: str, message: str) -> None:
        start, body = _answer(status, code, message)
        await send(start)
        await send(body)
