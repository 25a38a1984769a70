"""One logged-in IMAP connection to the address the egress gate checked, and what its answers mean.

:func:`open_session` connects, verifies TLS against the account's host name, logs in and learns
the folders' roles (special-use ``\\Sent``, ``\\Trash``, ``\\Drafts``, else their usual names);
:class:`ImapSession` runs the commands Tollgate uses, always by UID. Answers are parsed
defensively: a message that does not parse is skipped, text is clipped and NUL-free.
"""

from __future__ import annotations

import asyncio
import email.policy
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.parser import BytesParser
from typing import Any, Final, Literal, TypeVar

import aioimaplib

from tollgate.policies.errors import EgressDenied, NotFound, Unavailable
from tollgate.tools._render import server_text
from tollgate.tools.connectors.errors import AccountRefused, ServerAway
from tollgate.tools.web import html_to_text

__all__ = ["ID_PATTERN", "SERVER", "CannotMove", "Folder", "ImapSession", "MessageGone", "RemoteMessage", "open_session",
           "parse_message_id", "quoted", "searchable"]

SERVER: Final = "mail server"
"""What errors call the owner's mail servers."""
Folder = Literal["inbox", "sent", "trash", "drafts"]
_LETTERS: Final[dict[str, Folder]] = {"i": "inbox", "s": "sent", "t": "trash", "d": "drafts"}
_SPECIAL: Final = {"sent": b"\\Sent", "trash": b"\\Trash", "drafts": b"\\Drafts"}
_FALLBACK: Final = {"inbox": "INBOX", "sent": "Sent", "trash": "Trash", "drafts": "Drafts"}
ID_PATTERN: Final = r"imap_([istd])_([0-9]{1,10})_([0-9]{1,10})"
"""A message's id: ``imap_<folder letter>_<UIDVALIDITY>_<UID>``, the server's own names for it."""
_ID: Final = re.compile(ID_PATTERN)
_T = TypeVar("_T")
_BODY_BYTES: Final = 256 * 1024
_HEADERS: Final = "BODY.PEEK[HEADER.FIELDS (FROM TO SUBJECT DATE MESSAGE-ID)]"
_FETCH_START: Final = re.compile(rb"^\d+ FETCH \(")


class MessageGone(NotFound):
    """The message is no longer where it was listed (another mail client moved or deleted it)."""

    def __init__(self, message_id: str) -> None:
        super().__init__("mail message", message_id)
        self.message = ("the message is no longer where it was listed (another mail client moved or deleted it); "
                        "nothing was changed, list your mail again to see it as it is now")


class CannotMove(Unavailable):
    """The server can move messages only by expunging every message flagged deleted: nothing was moved."""

    def __init__(self) -> None:
        super().__init__(SERVER, "the mail server cannot move messages safely (it has neither MOVE nor UIDPLUS); "
                                 "nothing was moved")


@dataclass(frozen=True, slots=True)
class RemoteMessage:
    """A message as the server holds it."""

    id: str
    folder: Folder
    from_addr: str
    to_addrs: tuple[str, ...]
    subject: str
    at: datetime
    """When the server received it (INTERNALDATE)."""
    is_read: bool
    message_id: str
    body: str = ""
    """Only for a message read whole: the text part (capped)."""
    refused: tuple[str, ...] = ()
    """Only for a message just sent: recipients the SMTP server refused while it took the others."""



def quoted(text: str) -> str:
    """An IMAP quoted string (RFC 3501 §4.3); only for ASCII without line breaks (checked by the caller)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def searchable(text: str) -> bool:
    return text.isascii() and text.isprintable()


class _PinnedLoop:
    """The running event loop, except that ``create_connection`` goes to the one address the egress
    gate checked, verifying TLS against the host name.

    ``aioimaplib`` connects with ``loop.create_connection(host, port)`` on the loop it is given (a
    public parameter) and has no other way to be told the address; this is that way.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, address: str, host: str) -> None:
        self._loop = loop
        self._address = address
        self._host = host

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loop, name)

    def create_connection(self, factory: Any, host: str | None = None, port: int | None = None, *,
                          ssl: ssl.SSLContext | None = None, **kwargs: Any) -> Any:
        return self._loop.create_connection(factory, self._address, port, ssl=ssl,
                                            server_hostname=self._host if ssl is not None else None, **kwargs)


def _ok(response: Any) -> bool:
    return getattr(response, "result", "") == "OK"


def _fetched(lines: Sequence[Any]) -> list[tuple[bytes, bytes]]:
    """(attributes, literal) per message of a FETCH response; attributes after a literal are kept too."""
    out: list[list[bytes]] = []
    for line in lines:
        if isinstance(line, bytes) and _FETCH_START.match(line):
            out.append([line, b""])
        elif isinstance(line, bytearray) and out:
            out[-1][1] = bytes(line)
        elif isinstance(line, bytes) and out:
            out[-1][0] += b" " + line
    return [(attrs, data) for attrs, data in out]


def _int_of(pattern: bytes, text: bytes) -> int | None:
    found = re.search(pattern, text)
    return int(found.group(1)) if found else None


def _received(attrs: bytes) -> datetime:
    found = re.search(rb'INTERNALDATE "([^"]+)"', attrs)
    if found:
        try:
            return datetime.strptime(found.group(1).decode().strip(), "%d-%b-%Y %H:%M:%S %z")
        except ValueError:
            pass
    return datetime.fromtimestamp(0, UTC)


def _flags(attrs: bytes) -> set[bytes]:
    found = re.search(rb"FLAGS \(([^)]*)\)", attrs)
    return set(found.group(1).split()) if found else set()


def _addresses(value: object) -> tuple[str, ...]:
    return tuple(server_text(a.strip(), 200) for a in str(value or "").split(",") if a.strip())[:20]


def _text_of(raw: bytes) -> str:
    """The plain-text body of a message (or its HTML part with the tags dropped), clipped."""
    message = BytesParser(policy=email.policy.default).parsebytes(raw)
    try:
        part = message.get_body(preferencelist=("plain", "html"))  # type: ignore[attr-defined]
        if part is None:
            return ""
        content = part.get_content()
    except (KeyError, LookupError, ValueError, AttributeError):
        return ""
    text = html_to_text(content)[1] if part.get_content_type() == "text/html" else str(content)
    return server_text(text, 20_000)


class ImapSession:
    """One logged-in IMAP connection (:func:`open_session`): the commands Tollgate uses, by UID."""

    def __init__(self, client: aioimaplib.IMAP4, folders: dict[str, str], lost: asyncio.Future[None]) -> None:
        self.client = client
        self.folders = folders
        self.selected: tuple[str, int] | None = None
        self._lost = lost

    async def _ask(self, command: Awaitable[_T]) -> _T:
        """``command``'s answer, or ``ConnectionResetError`` as soon as the server closed the connection."""
        return await _unless_lost(command, self._lost)

    async def select(self, folder: Folder) -> int:
        """Select ``folder``; its UIDVALIDITY."""
        response = await self._ask(self.client.select(quoted(self.folders[folder])))
        if not _ok(response):
            raise NotFound("mail folder", folder)
        validity = next((_int_of(rb"\[UIDVALIDITY (\d+)\]", line) for line in response.lines
                         if isinstance(line, bytes) and b"UIDVALIDITY" in line), None)
        if validity is None:
            raise Unavailable(SERVER)
        self.selected = (folder, validity)
        return validity

    async def search(self, *criteria: str) -> list[int]:
        response = await self._ask(self.client.uid_search(*criteria, charset=None))
        if not _ok(response):
            raise Unavailable(SERVER)
        return sorted(int(n) for line in response.lines[:-1] if isinstance(line, bytes)
                      for n in line.split() if n.isdigit())

    async def headers(self, folder: Folder, validity: int, uids: Sequence[int]) -> list[RemoteMessage]:
        if not uids:
            return []
        response = await self._ask(self.client.uid("fetch", ",".join(map(str, uids)), f"(UID FLAGS INTERNALDATE {_HEADERS})"))
        if not _ok(response):
            raise Unavailable(SERVER)
        found = {m.id: m for m in (self._message(folder, validity, attrs, data) for attrs, data in _fetched(response.lines))
                 if m is not None}
        return [found[i] for i in (f"imap_{folder[0]}_{validity}_{u}" for u in uids) if i in found]

    def _message(self, folder: Folder, validity: int, attrs: bytes, data: bytes, body: str = "") -> RemoteMessage | None:
        uid = _int_of(rb"UID (\d+)", attrs)
        if uid is None:
            return None
        head = BytesParser(policy=email.policy.default).parsebytes(data, headersonly=True)
        try:
            sender, to, subject, mid = (head.get(name, "") for name in ("From", "To", "Subject", "Message-ID"))
        except (ValueError, IndexError, AttributeError):
            sender = to = subject = mid = ""
        return RemoteMessage(
            id=f"imap_{folder[0]}_{validity}_{uid}", folder=folder, from_addr=server_text(sender, 200),
            to_addrs=_addresses(to), subject=server_text(subject), at=_received(attrs),
            is_read=b"\\Seen" in _flags(attrs), message_id=server_text(mid, 300).strip(), body=body,
        )

    async def body(self, folder: Folder, validity: int, uid: int) -> RemoteMessage:
        response = await self._ask(self.client.uid("fetch", str(uid), f"(UID FLAGS INTERNALDATE BODY.PEEK[]<0.{_BODY_BYTES}>)"))
        parts = _fetched(response.lines) if _ok(response) else []
        if not parts:
            raise MessageGone(f"imap_{folder[0]}_{validity}_{uid}")
        attrs, raw = parts[0]
        message = self._message(folder, validity, attrs, raw, _text_of(raw))
        if message is None:
            raise NotFound("mail message", f"imap_{folder[0]}_{validity}_{uid}")
        return message

    async def by_message_id(self, folder: Folder, message_id: str) -> RemoteMessage | None:
        validity = await self.select(folder)
        uids = await self.search("HEADER", "Message-ID", quoted(message_id))
        found = await self.headers(folder, validity, uids[-1:])
        return found[0] if found else None

    async def append(self, folder: Folder, raw: bytes, flags: str) -> None:
        if not _ok(await self._ask(self.client.append(raw, mailbox=quoted(self.folders[folder]), flags=flags))):
            raise Unavailable(SERVER)

    async def mark_seen(self, uids: Sequence[int]) -> None:
        """Set ``\\Seen`` on ``uids`` of the selected folder."""
        if uids and not _ok(await self._ask(self.client.uid("store", ",".join(map(str, uids)), "+FLAGS.SILENT (\\Seen)"))):
            raise Unavailable(SERVER)

    async def move(self, uids: Sequence[int], to: Folder) -> None:
        """Move ``uids`` of the selected folder to ``to``: UID MOVE (RFC 6851), else copy, flag and expunge
        them by UID (RFC 4315). A server with neither is refused: its EXPUNGE would also remove what
        the owner had flagged deleted elsewhere."""
        numbers, target = ",".join(map(str, uids)), quoted(self.folders[to])
        if self.client.has_capability("MOVE"):
            done = _ok(await self._ask(self.client.uid("move", numbers, target)))
        elif not self.client.has_capability("UIDPLUS"):
            raise CannotMove()
        else:
            done = _ok(await self._ask(self.client.uid("copy", numbers, target)))
            if done:
                await self._ask(self.client.uid("store", numbers, "+FLAGS.SILENT (\\Deleted)"))
                await self._ask(self.client.uid("expunge", numbers))
        if not done:
            raise Unavailable(SERVER)

    async def remove(self, folder: Folder, uids: Sequence[int]) -> None:
        """Expunge ``uids`` of the selected ``folder`` (only drafts Tollgate saved itself are removed);
        on a server without UIDPLUS they are left, flagged deleted, rather than expunge anything else."""
        if uids:
            await self._ask(self.client.uid("store", ",".join(map(str, uids)), "+FLAGS.SILENT (\\Deleted)"))
            if self.client.has_capability("UIDPLUS"):
                await self._ask(self.client.uid("expunge", ",".join(map(str, uids))))


async def _unless_lost(step: Awaitable[_T], lost: asyncio.Future[None]) -> _T:
    """``step``'s result, or ``ConnectionResetError`` once ``lost`` is set.

    aioimaplib waits out its whole timeout for an answer on a connection the server has already
    closed (a greeting, a command); its public ``conn_lost_cb`` says so at once, and this stops
    the wait there, so a dropped connection is retried (or reported) without that wait.
    """
    task = asyncio.ensure_future(step)
    if not lost.done():
        await asyncio.wait({task, lost}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        return task.result()  # an answer that came before the connection closed still counts
    task.cancel()
    raise ConnectionResetError("the server closed the connection")


async def _close(client: aioimaplib.IMAP4, lost: asyncio.Future[None]) -> None:
    """Log out if the session got that far and is still connected, and close the connection whatever happened."""
    try:
        if not lost.done() and client.protocol is not None and client.get_state() in ("AUTH", "SELECTED"):
            await asyncio.wait_for(client.logout(), 5)
    except (aioimaplib.Abort, aioimaplib.CommandTimeout, OSError, TimeoutError):
        pass
    finally:
        transport = getattr(client.protocol, "transport", None)
        if transport is not None:
            transport.close()


def parse_message_id(message_id: str) -> tuple[Folder, int, int]:
    """(folder, UIDVALIDITY, UID) of a message id; :class:`~policies.errors.NotFound` for anything else."""
    found = _ID.fullmatch(message_id)
    if found is None:
        raise NotFound("mail message", message_id)
    return _LETTERS[found.group(1)], int(found.group(2)), int(found.group(3))


def _folders(lines: Sequence[Any]) -> dict[str, str]:
    """Folder roles from a LIST response (special-use flags), the usual names for those not flagged."""
    out = dict(_FALLBACK)
    for line in lines:
        if not isinstance(line, bytes):
            continue
        found = re.match(rb'\(([^)]*)\) (?:"[^"]*"|NIL) "?([^"]+)"?$', line)
        if found is None:
            continue
        for role, flag in _SPECIAL.items():
            if flag in found.group(1).split():
                out[role] = found.group(2).decode("utf-8", "replace")
    return out


@asynccontextmanager
async def open_session(address: str, host: str, port: int, tls: ssl.SSLContext | None, username: str, password: str,
                       timeout: float) -> AsyncIterator[ImapSession]:
    """A session logged in to ``host:port`` at ``address`` (TLS verified for ``host`` when ``tls`` is given).

    Raises :class:`AccountRefused` for a refused login, :class:`EgressDenied` (``certificate_refused``)
    for a certificate that does not verify, and :class:`ServerAway` for a server that cannot be
    reached or stops answering; the whole session is bounded by ``3 × timeout``.
    """
    running = asyncio.get_running_loop()
    loop = _PinnedLoop(running, address, host)
    lost: asyncio.Future[None] = running.create_future()

    def on_lost(_exc: Exception | None) -> None:
        if not lost.done():
            lost.set_result(None)

    try:
        async with asyncio.timeout(timeout * 3):
            client = aioimaplib.IMAP4(host=host, port=port, loop=loop,  # type: ignore[arg-type]
                                      timeout=timeout, ssl_context=tls, conn_lost_cb=on_lost)
            try:
                await _unless_lost(client.wait_hello_from_server(), lost)
                if not _ok(await _unless_lost(client.login(username, password), lost)):
                    raise AccountRefused(SERVER)
                listed = await _unless_lost(client.list('""', '"*"'), lost)
                yield ImapSession(client, _folders(listed.lines if _ok(listed) else []), lost)
            finally:
                await _close(client, lost)
    except ssl.SSLCertVerificationError:
        raise EgressDenied("certificate_refused") from None
    except (OSError, TimeoutError, ssl.SSLError, aioimaplib.Abort, aioimaplib.CommandTimeout,
            asyncio.IncompleteReadError):
        raise ServerAway(SERVER) from None
