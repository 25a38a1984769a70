"""The event loop every Tollgate process runs on: uvloop.

uvloop is asyncio's loop rebuilt on libuv: sockets, transports, timers and callback scheduling
run in C. A served turn spends a good part of its CPU in that machinery (an HTTP request, an SSE
response and PostgreSQL round trips per turn), so the server, the workers, the CLI and the
benchmarks all run on it. It is a drop-in loop: psycopg's async connections, uvicorn and httpx
use only the public asyncio API it implements.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

__all__ = ["Policy", "new_event_loop", "run"]

T = TypeVar("T")

new_event_loop = uvloop.new_event_loop
"""A new uvloop loop."""
Policy = uvloop.EventLoopPolicy
"""The policy whose loops are uvloop's (for code that makes loops through the policy, like the tests' runner)."""


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on a new uvloop loop."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)
