"""A real CalDAV server for the connector tests: Radicale, in its own process on loopback.

Plain-text logins from an htpasswd file, the filesystem storage under the test's directory,
each user only their own collections. :meth:`RadicaleServer.calendar` makes a calendar
collection (MKCALENDAR) and returns its address; :meth:`stop` and :meth:`start` take the
server away and bring it back on the same port, with the same data.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from tests.children import free_port, wait_answering

__all__ = ["RadicaleServer", "radicale"]


@dataclass
class RadicaleServer:
    """A running Radicale and how to reach it."""

    port: int
    root: Path
    users: dict[str, str]
    proc: subprocess.Popen[Any] | None = field(default=None, repr=False)
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        config = self.root / "config"
        log = self.root / "radicale.log"
        self._log = log.open("ab")
        self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
            [sys.executable, "-m", "radicale", "--config", str(config)],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=self.root,
        )
        wait_answering(f"{self.url}/.web/", self.proc, log, what="radicale", timeout=60)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def calendar(self, user: str, name: str = "calendar") -> str:
        """Create ``user``'s calendar collection ``name`` and return its address."""
        url = f"{self.url}/{user}/{name}/"
        body = ('<?xml version="1.0" encoding="utf-8"?><c:mkcalendar xmlns:d="DAV:" '
                'xmlns:c="urn:ietf:params:xml:ns:caldav"><d:set><d:prop><d:displayname>'
                f"{name}</d:displayname></d:prop></d:set></c:mkcalendar>")
        response = httpx.request("MKCALENDAR", url, content=body, auth=(user, self.users[user]), timeout=10)
        assert response.status_code in (201, 405), response.text  # 405: it exists
        return url


@contextmanager
def radicale(root: Path, users: dict[str, str]) -> Iterator[RadicaleServer]:
    """A Radicale server for ``users`` (name -> password), storing under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "users").write_text("".join(f"{name}:{password}\n" for name, password in users.items()))
    server = RadicaleServer(port=free_port(), root=root, users=users)
    (root / "config").write_text(f"""[server]
hosts = 127.0.0.1:{server.port}
[auth]
type = htpasswd
htpasswd_filename = {root / "users"}
htpasswd_encryption = plain
delay = 0
[rights]
type = owner_only
[storage]
filesystem_folder = {root / "collections"}
[logging]
level = warning
""")
    server.start()
    try:
        yield server
    finally:
        server.stop()
