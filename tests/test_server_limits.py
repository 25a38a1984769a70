"""Request limits over real sockets: oversized headers (431), an oversized body (413), a body that
never arrives (408), each answered at once with the API's error body; a request within them runs."""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.server_harness import Api, LiveServer


async def _raw(server: LiveServer, request: bytes, *, then_wait: float = 0.0) -> tuple[int, dict[str, str], float]:
    """Send ``request`` bytes on a fresh connection; the status, the JSON body and how long the answer took."""
    where = urlsplit(server.url)
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    started = time.monotonic()
    try:
        writer.write(request)
        await writer.drain()
        if then_wait:
            await asyncio.sleep(then_wait)
        answer = await asyncio.wait_for(reader.read(), timeout=30)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body.strip().startswith(b"{") else {}, time.monotonic() - started


async def test_headers_past_the_limit_are_431(live_server: LiveServer, api: Api) -> None:
    big = "x" * 20_000  # past the 16 KiB default
    async with httpx.AsyncClient(base_url=live_server.url, timeout=30) as client:
        response = await client.get("/v1/me", headers={**api.auth, "X-Padding": big})
    assert response.status_code == 431 and response.json()["code"] == "headers_too_large"
    assert (await api.get("/v1/me")).status_code == 200  # within the limit


async def test_a_body_declared_past_the_limit_is_413_before_it_is_read(live_server: LiveServer, api: Api) -> None:
    head = (f"POST /v1/chat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api.token}\r\n"
            "Content-Type: application/json\r\nContent-Length: 268435456\r\n\r\n").encode()
    status, body, took = await _raw(live_server, head + b'{"message": "')
    assert status == 413 and body["code"] == "body_too_large" and took < 5  # 256 MB declared, none of it read


async def test_a_body_past_the_limit_sent_in_chunks_is_413(live_server: LiveServer, api: Api) -> None:
    """No length declared: the body is counted as it comes, and refused once it passes 1 MiB. The
    answer is read while sending (the server closes without reading the rest, as it should)."""
    where = urlsplit(live_server.url)
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    got = bytearray()

    async def read_all() -> None:
        try:
            while chunk := await reader.read(65_536):
                got.extend(chunk)
        except ConnectionResetError:
            pass

    reading = asyncio.create_task(read_all())
    writer.write((f"POST /v1/chat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api.token}\r\n"
                  "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode())
    piece = b"a" * 65_536
    sent = 0
    try:
        while not got and sent < 4 * 1_048_576:
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            sent += len(piece)
            await asyncio.sleep(0.005)
        await asyncio.wait_for(reading, timeout=30)
    except ConnectionResetError:
        await asyncio.wait_for(reading, timeout=30)
    finally:
        writer.close()
    head, _, body = bytes(got).partition(b"\r\n\r\n")
    assert head.split(b" ", 2)[1] == b"413" and json.loads(body)["code"] == "body_too_large"
    assert sent <= 2 * 1_048_576  # refused soon after the limit, not after the whole body


@pytest.mark.parametrize("sent", [b"", b'{"message": "hel'])
async def test_a_body_that_does_not_arrive_in_time_is_408(
    live_server: LiveServer, api: Api, sent: bytes
) -> None:
    """Declared, then never (or only partly) sent: the request once held its connection forever."""
    head = (f"POST /v1/chat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api.token}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n").encode()
    limit = live_server.settings.body_read_seconds
    status, answer, took = await _raw(live_server, head + sent)
    assert status == 408 and answer["code"] == "body_timeout"
    assert limit - 0.5 <= took <= limit + 5


async def test_a_405_names_every_method_the_path_answers_to(api: Api) -> None:
    """``/v1/threads/{id}`` is read, renamed and deleted by three routes: the Allow header once named
    only the first one's method."""
    response = await api.client.put("/v1/threads/some-thread", headers=api.auth, json={})
    assert response.status_code == 405 and response.json()["code"] == "method_not_allowed"
    assert set(response.headers["allow"].split(", ")) == {"DELETE", "GET", "HEAD", "PATCH"}
