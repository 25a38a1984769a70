"""A TCP relay on loopback in front of a real server, that can drop connections on purpose.

Tests point an account at the relay instead of the server to make the server "go away" for
exactly one connection: :meth:`FlakyRelay.drop_next` closes the next ``n`` connections as soon
as they arrive (and every connection open now), and :meth:`FlakyRelay.drop_when_sent` closes the
connection a client sends some bytes on (a command) instead of passing them on, so that command
waits for an answer that never comes. Then it relays again as if nothing happened.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable


class _Dropped(Exception):
    """A connection the relay closes on purpose."""


class FlakyRelay:
    """Relays ``127.0.0.1:port`` to ``127.0.0.1:target``; counts and drops connections on request."""

    def __init__(self, target: int, *, unix_path: str | None = None) -> None:
        self.target = target
        self.unix_path = unix_path
        """A Unix socket to relay to instead of ``127.0.0.1:target`` (a local PostgreSQL)."""
        self.port = 0
        self.connections = 0
        """Connections accepted so far, dropped ones included."""
        self.dropped = 0
        """Connections closed on purpose so far."""
        self._to_drop = 0
        self._down = False
        self._drop_on: bytes | None = None
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.Task[None]] = set()

    def drop_next(self, n: int = 1) -> None:
        """Close the next ``n`` connections on arrival, and every connection open now."""
        self._to_drop += n
        for task in list(self._open):
            task.cancel()

    def go_down(self) -> None:
        """Close every connection open now and refuse every new one, until :meth:`come_back`."""
        self._down = True
        for task in list(self._open):
            task.cancel()

    def come_back(self) -> None:
        """Relay again."""
        self._down = False

    def drop_when_sent(self, marker: bytes) -> None:
        """Close the next connection on which a client sends ``marker``, before the server sees it."""
        self._drop_on = marker

    def _passes(self, data: bytes) -> bool:
        if self._drop_on is not None and self._drop_on in data:
            self._drop_on = None
            self.dropped += 1
            return False
        return True

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._open):
            task.cancel()
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self._down:
            self.dropped += 1
            writer.close()
            return
        if self._to_drop:
            self._to_drop -= 1
            self.dropped += 1
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._open.add(task)
        try:
            if self.unix_path is not None:
                up_reader, up_writer = await asyncio.open_unix_connection(self.unix_path)
            else:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            self._open.discard(task)
            return
        try:
            await asyncio.gather(_pipe(reader, up_writer, self._passes), _pipe(up_reader, writer))
        except (asyncio.CancelledError, _Dropped):
            pass
        finally:
            self._open.discard(task)
            for w in (writer, up_writer):
                w.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                passes: Callable[[bytes], bool] = lambda _data: True) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            if not passes(data):
                raise _Dropped  # the relay closes the connection, both ways
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError):
        writer.write_eof()


@contextlib.asynccontextmanager
async def flaky_relay(target: int, *, unix_path: str | None = None) -> AsyncIterator[FlakyRelay]:
    """A started :class:`FlakyRelay` to ``target`` (or ``unix_path``), closed on exit."""
    relay = FlakyRelay(target, unix_path=unix_path)
    await relay.start()
    try:
        yield relay
    finally:
        await relay.close()
