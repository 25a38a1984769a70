"""A TCP relay to PostgreSQL that counts the round trips of everyone connected through it.

P9's servers are separate processes, so the in-process protocol trace of :mod:`bench.roundtrips`
cannot see them; their connections go through this relay instead (in the benchmark's process,
on loopback). A round trip is counted as P6 counts it: the client sending after the server has
answered, per connection. A client that pipelines sends once and counts once. Counting is on
TCP reads, so a reply split over reads still counts once; the count can be over (a client that
sends while an earlier reply is still arriving), never under.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

__all__ = ["CountingRelay", "counting_relay"]

_CHUNK = 1 << 16


@dataclass
class CountingRelay:
    """The relay's address and what it has counted."""

    port: int
    round_trips: int = 0
    connections: int = 0


@asynccontextmanager
async def counting_relay(socket_path: str) -> AsyncIterator[CountingRelay]:
    """Listen on a free loopback port and forward every connection to the Unix socket ``socket_path``."""
    relay = CountingRelay(port=0)

    async def serve(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        relay.connections += 1
        server_r, server_w = await asyncio.open_unix_connection(socket_path)
        answered = [True]  # the server spoke last: the next client send is a new round trip

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, from_client: bool) -> None:
            try:
                while data := await src.read(_CHUNK):
                    if from_client and answered[0]:
                        relay.round_trips += 1
                    answered[0] = not from_client
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        await asyncio.gather(pump(client_r, server_w, True), pump(server_r, client_w, False))

    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=1024)
    relay.port = server.sockets[0].getsockname()[1]
    try:
        async with server:
            yield relay
    finally:
        server.close()
