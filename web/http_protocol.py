"""uvicorn's HTTP protocol (httptools), with the writes of one event-loop step sent as one.

uvicorn writes a response's status line and headers to the socket as soon as the app sends
``http.response.start``, and each body part as it comes: a streamed turn is one write for the
headers, then one per batch of events, and a JSON response two. On loopback and in small
virtual machines each write is a system call that wakes the client, costing more CPU than
everything else the server does to send it (about 0.1 ms of the server's CPU per write on the
benchmark's 2 cores, measured with a runner streaming canned events under P3's load). Here writes made during one step of the event loop wait in a
buffer and go out together at the end of that step: headers with the first body part, a
batch of events with the end of the response. Nothing waits longer than the step that wrote it,
so latency is unchanged.

uvicorn takes the protocol class as ``uvicorn.Config(http=HttpProtocol)`` (``tollgate serve``
and the test server use it); the transport is wrapped once per connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["HttpProtocol"]


class _StepWrites:
    """A transport whose writes in one event-loop step reach the socket as one write.

    Everything but writing goes to the wrapped transport; closing it (or handing it to another
    protocol) sends what is buffered first.
    """

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def _flush(self) -> None:
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending = []
        if not self._transport.is_closing():  # the client went away: as the transport itself would drop it
            self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._flush()
        self._transport.set_protocol(protocol)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a transport that sends each event-loop step's writes as one."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_StepWrites(transport, self.loop))  # type: ignore[arg-type]
