"""The server's HTTP protocol sends the writes of one event-loop step as one write, on real sockets."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import uvicorn

from web.http_protocol import HttpProtocol, _StepWrites


class _Noted:
    """A real transport, noting each write it is asked for (what reaches the socket as one call)."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


async def _pair() -> tuple[_Noted, _StepWrites, socket.socket]:
    ours, theirs = socket.socketpair()
    transport, _ = await asyncio.get_running_loop().connect_accepted_socket(asyncio.Protocol, ours)
    noted = _Noted(transport)  # type: ignore[arg-type]
    return noted, _StepWrites(noted, asyncio.get_running_loop()), theirs  # type: ignore[arg-type]


async def _read_all(peer: socket.socket) -> bytes:
    peer.setblocking(False)
    loop = asyncio.get_running_loop()
    chunks = []
    while chunk := await loop.sock_recv(peer, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


async def test_writes_of_one_step_reach_the_socket_as_one_and_later_steps_as_their_own() -> None:
    noted, steps, peer = await _pair()
    steps.write(b"HTTP/1.1 200 OK\r\n\r\n")
    steps.write(bytearray(b"5\r\nhello\r\n"))
    assert noted.writes == []  # not before the step ends
    await asyncio.sleep(0)
    assert noted.writes == [b"HTTP/1.1 200 OK\r\n\r\n5\r\nhello\r\n"]
    steps.write(b"0\r\n\r\n")
    await asyncio.sleep(0)
    assert noted.writes[1:] == [b"0\r\n\r\n"]
    steps.close()
    assert await _read_all(peer) == b"HTTP/1.1 200 OK\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    peer.close()


async def test_closing_sends_what_the_step_wrote_first() -> None:
    noted, steps, peer = await _pair()
    steps.write(b"last words")
    steps.close()  # in the same step: written, then closed
    assert noted.writes == [b"last words"]
    assert await _read_all(peer) == b"last words"
    await asyncio.sleep(0)  # the step's flush finds nothing left to send
    assert noted.writes == [b"last words"]
    peer.close()


async def test_a_write_to_a_transport_already_closing_is_dropped() -> None:
    noted, steps, peer = await _pair()
    steps.write(b"too late")
    noted.transport.close()  # the connection went away during the step
    await asyncio.sleep(0)
    assert noted.writes == []
    peer.close()


async def test_a_streamed_response_starts_with_its_headers_and_first_part_in_one_write() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b"second", "more_body": False})

    noted: list[_Noted] = []

    class Noting(HttpProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            noted.append(_Noted(transport))
            super().connection_made(noted[-1])  # type: ignore[arg-type]

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", ws="none", http=Noting))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}") as client:
            response = await client.get("/")
        assert response.status_code == 200 and response.text == "firstsecond"
        writes = noted[0].writes
        assert len(writes) == 2  # headers with the first part; the second part with the end of the response
        assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and writes[0].endswith(b"\r\n\r\n5\r\nfirst\r\n")
        assert writes[1] == b"6\r\nsecond\r\n0\r\n\r\n"
    finally:
        server.should_exit = True
        await task
        sock.close()
