"""Mail on the owner's own servers: IMAP (RFC 3501) to read, SMTP (RFC 5321) to send.

:class:`ImapMailbox` lists, reads, marks read and moves to the Trash folder, and sends. Its
contract:

* **Ids are the server's.** A message is ``imap_<folder>_<UIDVALIDITY>_<UID>`` (folder ``i``
  inbox, ``s`` sent, ``t`` trash, ``d`` drafts): a mailbox whose UIDVALIDITY changed no longer
  has the message an old id named, and it is :class:`~policies.errors.NotFound`.
* **Nothing sent twice.** A message carries a Message-ID derived from the write's idempotency
  key. Before sending, the Sent folder is searched for it (found: it was sent, nothing is done);
  the message is then saved to Drafts, sent over SMTP, saved to Sent and its draft removed. A
  copy still in Drafts is a send that stopped between those steps, which may or may not have
  reached the server: :meth:`ImapMailbox.sent_state` says ``unknown`` and it is never sent
  again by Tollgate (:class:`SendUncertain`).
* **Nothing deleted.** Trash is a move to the server's Trash folder (special-use ``\\Trash``);
  reading fetches with ``BODY.PEEK`` and never marks a message read.
* **Secrets stay secret.** Logins travel only inside the protocol's own LOGIN and AUTH; a
  refused login is :class:`~tools.connectors.errors.AccountRefused` naming neither the password
  nor the host. Plain text (``imap://``, ``smtp://``) is refused unless the operator allowed it
  for the host; ``smtp+starttls://`` upgrades before logging in.
* **Through the egress gate.** Each connection goes to the one address the gate checked for the
  account's host and port (:meth:`graph.egress_transport.EgressClient.address`); TLS is verified
  against the host name, and a certificate that does not verify is refused
  (:class:`~policies.errors.EgressDenied`, ``certificate_refused``). A server that cannot be
  reached is :class:`~tools.connectors.errors.ServerAway` (transient).
* **Hostile servers.** Bodies are fetched up to a cap, headers are decoded by the standard
  library's parser and clipped, responses that do not parse are skipped.

``aioimaplib`` (asyncio, maintained) over ``imapclient`` (blocking, a thread per call);
``aiosmtplib`` for SMTP: it takes a connected socket, which is how the pinned address reaches it.
"""

from __future__ import annotations

import asyncio
import email.policy
import re
import socket
import ssl
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import format_datetime, parseaddr
from typing import Any, Final, Literal
from urllib.parse import urlsplit

import aioimaplib
import aiosmtplib

from graph.egress_transport import EgressClient
from policies.errors import EgressDenied, ErrorCode, NotFound, TollgateError, Unavailable
from tools.connectors.errors import AccountRefused, ServerAway
from tools.web import html_to_text

__all__ = ["CannotMove", "ImapMailbox", "MailAccount", "MessageGone", "RemoteMessage", "SendRefused", "SendUncertain", "message_id_for"]

Folder = Literal["inbox", "sent", "trash", "drafts"]
_LETTERS: Final[dict[str, Folder]] = {"i": "inbox", "s": "sent", "t": "trash", "d": "drafts"}
_SPECIAL: Final = {"sent": b"\\Sent", "trash": b"\\Trash", "drafts": b"\\Drafts"}
_FALLBACK: Final = {"inbox": "INBOX", "sent": "Sent", "trash": "Trash", "drafts": "Drafts"}
_ID: Final = re.compile(r"imap_([istd])_([0-9]{1,10})_([0-9]{1,10})")
_NAMESPACE: Final = uuid.UUID("0f4f3c2a-6a55-4d55-8d3c-6f0a8e1b7c21")  # Tollgate's, for Message-IDs from keys
_TEXT_CHARS: Final = 500
_BODY_BYTES: Final = 256 * 1024
_SCAN: Final = 200  # newest messages filtered here when the server cannot search the text
_HEADERS: Final = "BODY.PEEK[HEADER.FIELDS (FROM TO SUBJECT DATE MESSAGE-ID)]"
_FETCH_START: Final = re.compile(rb"^\d+ FETCH \(")
_PORTS: Final = {"imaps": 993, "imap": 143, "smtps": 465, "smtp+starttls": 587, "smtp": 25}
_SERVER: Final = "mail server"


class SendUncertain(Unavailable):
    """A send stopped between saving its draft and saving it to Sent: it may have gone out.

    It is never sent again by Tollgate; the draft stays for the owner to check.
    """

    def __init__(self) -> None:
        self.what = _SERVER
        TollgateError.__init__(self, "the message may or may not have been sent (it is in your Drafts folder); "
                                     "it was not sent again, check with the recipient before sending it yourself")


class MessageGone(NotFound):
    """The message is no longer where it was listed (another mail client moved or deleted it)."""

    def __init__(self, message_id: str) -> None:
        super().__init__("mail message", message_id)
        self.message = ("the message is no longer where it was listed (another mail client moved or deleted it); "
                        "nothing was changed, list your mail again to see it as it is now")


class CannotMove(Unavailable):
    """The server can move messages only by expunging every message flagged deleted: nothing was moved."""

    def __init__(self) -> None:
        self.what = _SERVER
        TollgateError.__init__(self, "the mail server cannot move messages safely (it has neither MOVE nor UIDPLUS); "
                                     "nothing was moved")


class SendRefused(TollgateError):
    """The SMTP server refused the message (a recipient, the sender, the content): nothing was sent."""

    code: ErrorCode = "unavailable"

    def __init__(self, reason: str) -> None:
        super().__init__(f"the mail server refused to send the message ({reason}); nothing was sent")


@dataclass(frozen=True, slots=True)
class MailAccount:
    """One owner's mailbox and outgoing server, with the login both share."""

    imap_url: str
    """``imaps://host[:993]``, or ``imap://host:port`` for a host allowed plain text."""
    smtp_url: str
    """``smtps://host[:465]``, ``smtp+starttls://host[:587]``, or ``smtp://host:port`` for a host allowed plain text."""
    username: str
    password: str
    address: str
    """The owner's address: the ``From`` of what they send."""
    plaintext_hosts: frozenset[str] = frozenset()
    """Hosts the operator allows without TLS (a test server on loopback, a LAN box)."""

    def __repr__(self) -> str:  # the password never reaches a log through a repr
        return (f"MailAccount(imap_url={self.imap_url!r}, smtp_url={self.smtp_url!r}, username={self.username!r}, "
                f"address={self.address!r}, password='***')")


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
    """Only for :meth:`ImapMailbox.read`: the text part (capped)."""
    refused: tuple[str, ...] = ()
    """Only for :meth:`ImapMailbox.send`: recipients the SMTP server refused while it took the others."""


@dataclass(frozen=True, slots=True)
class _Endpoint:
    host: str
    port: int
    security: Literal["tls", "starttls", "none"]


def _endpoint(url: str, schemes: Iterable[str], plaintext_hosts: frozenset[str]) -> _Endpoint:
    """The server of an account address; refuses another scheme, credentials in it, or plain text not allowed."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise EgressDenied("bad_url") from None
    scheme = parts.scheme.lower()
    if scheme not in schemes or not parts.hostname or parts.username or parts.password:
        raise EgressDenied("bad_url")
    security: Literal["tls", "starttls", "none"] = (
        "tls" if scheme in ("imaps", "smtps") else "starttls" if scheme == "smtp+starttls" else "none")
    if security == "none" and parts.hostname not in plaintext_hosts:
        raise EgressDenied("plaintext_refused")  # a password over plain text is refused by default
    return _Endpoint(parts.hostname, port or _PORTS[scheme], security)


def message_id_for(key: str, address: str) -> str:
    """The Message-ID of the message sent by write ``key``: the same for every attempt of it."""
    domain = address.rpartition("@")[2].strip() or "tollgate.invalid"
    if not re.fullmatch(r"[A-Za-z0-9.-]{1,200}", domain):
        domain = "tollgate.invalid"
    return f"<{uuid.uuid5(_NAMESPACE, key)}.tollgate@{domain}>"


def _clip(value: object, chars: int = _TEXT_CHARS) -> str:
    return str(value or "").replace("\x00", "")[:chars]


def _quoted(text: str) -> str:
    """An IMAP quoted string (RFC 3501 §4.3); only for ASCII without line breaks (checked by the caller)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _searchable(text: str) -> bool:
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
    return tuple(_clip(a.strip(), 200) for a in str(value or "").split(",") if a.strip())[:20]


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
    return _clip(text, 20_000)


class _Session:
    """One logged-in IMAP connection (see :meth:`ImapMailbox._session`)."""

    def __init__(self, client: aioimaplib.IMAP4, folders: dict[str, str]) -> None:
        self.client = client
        self.folders = folders
        self.selected: tuple[str, int] | None = None

    async def select(self, folder: Folder) -> int:
        """Select ``folder``; its UIDVALIDITY."""
        response = await self.client.select(_quoted(self.folders[folder]))
        if not _ok(response):
            raise NotFound("mail folder", folder)
        validity = next((_int_of(rb"\[UIDVALIDITY (\d+)\]", line) for line in response.lines
                         if isinstance(line, bytes) and b"UIDVALIDITY" in line), None)
        if validity is None:
            raise Unavailable(_SERVER)
        self.selected = (folder, validity)
        return validity

    async def search(self, *criteria: str) -> list[int]:
        response = await self.client.uid_search(*criteria, charset=None)
        if not _ok(response):
            raise Unavailable(_SERVER)
        return sorted(int(n) for line in response.lines[:-1] if isinstance(line, bytes)
                      for n in line.split() if n.isdigit())

    async def headers(self, folder: Folder, validity: int, uids: Sequence[int]) -> list[RemoteMessage]:
        if not uids:
            return []
        response = await self.client.uid("fetch", ",".join(map(str, uids)), f"(UID FLAGS INTERNALDATE {_HEADERS})")
        if not _ok(response):
            raise Unavailable(_SERVER)
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
            id=f"imap_{folder[0]}_{validity}_{uid}", folder=folder, from_addr=_clip(sender, 200),
            to_addrs=_addresses(to), subject=_clip(subject), at=_received(attrs),
            is_read=b"\\Seen" in _flags(attrs), message_id=_clip(mid, 300).strip(), body=body,
        )

    async def body(self, folder: Folder, validity: int, uid: int) -> RemoteMessage:
        response = await self.client.uid("fetch", str(uid), f"(UID FLAGS INTERNALDATE BODY.PEEK[]<0.{_BODY_BYTES}>)")
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
        uids = await self.search("HEADER", "Message-ID", _quoted(message_id))
        found = await self.headers(folder, validity, uids[-1:])
        return found[0] if found else None

    async def append(self, folder: Folder, raw: bytes, flags: str) -> None:
        if not _ok(await self.client.append(raw, mailbox=_quoted(self.folders[folder]), flags=flags)):
            raise Unavailable(_SERVER)

    async def move(self, uids: Sequence[int], to: Folder) -> None:
        """Move ``uids`` of the selected folder to ``to``: UID MOVE (RFC 6851), else copy, flag and expunge
        them by UID (RFC 4315). A server with neither is refused: its EXPUNGE would also remove what
        the owner had flagged deleted elsewhere."""
        numbers, target = ",".join(map(str, uids)), _quoted(self.folders[to])
        if self.client.has_capability("MOVE"):
            done = _ok(await self.client.uid("move", numbers, target))
        elif not self.client.has_capability("UIDPLUS"):
            raise CannotMove()
        else:
            done = _ok(await self.client.uid("copy", numbers, target))
            if done:
                await self.client.uid("store", numbers, "+FLAGS.SILENT (\\Deleted)")
                await self.client.uid("expunge", numbers)
        if not done:
            raise Unavailable(_SERVER)

    async def remove(self, folder: Folder, uids: Sequence[int]) -> None:
        """Expunge ``uids`` of the selected ``folder`` (only drafts Tollgate saved itself are removed);
        on a server without UIDPLUS they are left, flagged deleted, rather than expunge anything else."""
        if uids and not self.client.has_capability("UIDPLUS"):
            await self.client.uid("store", ",".join(map(str, uids)), "+FLAGS.SILENT (\\Deleted)")
        elif uids:
            await self.client.uid("store", ",".join(map(str, uids)), "+FLAGS.SILENT (\\Deleted)")
            await self.client.uid("expunge", ",".join(map(str, uids)))


def _certificate_refused(exc: BaseException) -> bool:
    """Whether ``exc`` is (or wraps) a certificate that did not verify for the host."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


async def _close(client: aioimaplib.IMAP4) -> None:
    """Log out if the session got that far, and close the connection whatever happened."""
    try:
        if client.protocol is not None and client.get_state() in ("AUTH", "SELECTED"):
            await asyncio.wait_for(client.logout(), 5)
    except (aioimaplib.Abort, aioimaplib.CommandTimeout, OSError, TimeoutError):
        pass
    finally:
        transport = getattr(client.protocol, "transport", None)
        if transport is not None:
            transport.close()


def _parse_id(message_id: str) -> tuple[Folder, int, int]:
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


class ImapMailbox:
    """One owner's mailbox over IMAP and their outgoing server over SMTP, through ``http``'s egress gate."""

    def __init__(self, http: EgressClient, account: MailAccount, *, tls: ssl.SSLContext | None = None) -> None:
        """``tls`` verifies the servers' certificates: the system's authorities unless given (a test's own)."""
        self.account = account
        self._tls = tls or ssl.create_default_context()
        self._imap = _endpoint(account.imap_url, ("imaps", "imap"), account.plaintext_hosts)
        self._smtp = _endpoint(account.smtp_url, ("smtps", "smtp+starttls", "smtp"), account.plaintext_hosts)
        self._http = http.for_hosts(*(f"[{e.host}]:{e.port}" if ":" in e.host else f"{e.host}:{e.port}"
                                      for e in (self._imap, self._smtp)))
        self._timeout = http.limits.timeout_seconds

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[_Session]:
        """A logged-in IMAP session; every failure to reach the server is :class:`ServerAway`."""
        address = await self._http.address(self._imap.host, self._imap.port)
        loop = _PinnedLoop(asyncio.get_running_loop(), address, self._imap.host)
        context = self._tls if self._imap.security == "tls" else None
        try:
            async with asyncio.timeout(self._timeout * 3):
                client = aioimaplib.IMAP4(host=self._imap.host, port=self._imap.port, loop=loop,  # type: ignore[arg-type]
                                          timeout=self._timeout, ssl_context=context)
                try:
                    await client.wait_hello_from_server()
                    if not _ok(await client.login(self.account.username, self.account.password)):
                        raise AccountRefused(_SERVER)
                    listed = await client.list('""', '"*"')
                    yield _Session(client, _folders(listed.lines if _ok(listed) else []))
                finally:
                    await _close(client)
        except ssl.SSLCertVerificationError:
            raise EgressDenied("certificate_refused") from None
        except (OSError, TimeoutError, ssl.SSLError, aioimaplib.Abort, aioimaplib.CommandTimeout,
                asyncio.IncompleteReadError):
            raise ServerAway(_SERVER) from None

    async def check(self) -> None:
        """Log in to both servers once: :class:`AccountRefused` for a bad login, :class:`ServerAway` when one
        cannot be reached."""
        async with self._session() as session:
            await session.select("inbox")
        smtp = await self._smtp_connected()
        await self._smtp_quit(smtp)

    async def list(self, folder: Folder, *, unread_only: bool = False, contains: str | None = None,
                   limit: int = 10) -> tuple[list[RemoteMessage], bool]:
        """Up to ``limit`` messages of ``folder``, newest first, and whether there are more.

        ``contains`` matches the sender (the recipients in ``sent``), searched by the server;
        text it cannot search (outside ASCII) is matched here among the newest messages.
        """
        criteria = ["UNSEEN"] if unread_only and folder != "sent" else []
        local = None
        if contains:
            if _searchable(contains):
                criteria += ["TO" if folder == "sent" else "FROM", _quoted(contains)]
            else:
                local = contains.casefold()
        async with self._session() as session:
            validity = await session.select(folder)
            uids = await session.search(*(criteria or ["ALL"]))
            if local is None:
                newest = list(reversed(uids[-(limit + 1):]))
                return (await session.headers(folder, validity, newest))[:limit], len(uids) > limit
            scanned = await session.headers(folder, validity, list(reversed(uids[-_SCAN:])))
        who = (lambda m: " ".join(m.to_addrs)) if folder == "sent" else (lambda m: m.from_addr)
        matched = [m for m in scanned if local in who(m).casefold()]
        return matched[:limit], len(matched) > limit

    async def read(self, message_id: str) -> RemoteMessage:
        """One message with its text body, not marked read; :class:`NotFound` when the id names nothing now."""
        folder, validity, uid = _parse_id(message_id)
        async with self._session() as session:
            if await session.select(folder) != validity:
                raise MessageGone(message_id)
            return await session.body(folder, validity, uid)

    async def messages(self, ids: Sequence[str]) -> list[RemoteMessage]:
        """The messages ``ids`` name, in order (headers and flags); :class:`NotFound` if one is gone."""
        wanted = [_parse_id(i) for i in ids]
        found: dict[str, RemoteMessage] = {}
        async with self._session() as session:
            for folder in dict.fromkeys(f for f, _, _ in wanted):
                validity = await session.select(folder)
                uids = [u for f, v, u in wanted if f == folder and v == validity]
                found |= {m.id: m for m in await session.headers(folder, validity, uids)}
        for message_id in ids:
            if message_id not in found:
                raise MessageGone(message_id)
        return [found[i] for i in ids]

    async def mark_read(self, messages: Sequence[RemoteMessage]) -> set[str]:
        """Set ``\\Seen`` on ``messages``; the ids of those not read before."""
        unread = [m for m in messages if not m.is_read]
        async with self._session() as session:
            for folder in dict.fromkeys(m.folder for m in unread):
                validity = await session.select(folder)
                uids = [_parse_id(m.id)[2] for m in unread if m.folder == folder and _parse_id(m.id)[1] == validity]
                if uids and not _ok(await session.client.uid("store", ",".join(map(str, uids)), "+FLAGS.SILENT (\\Seen)")):
                    raise Unavailable(_SERVER)
        return {m.id for m in unread}

    async def trash(self, messages: Sequence[RemoteMessage]) -> set[str]:
        """Move ``messages`` to the Trash folder (kept there, restorable); the ids of those moved.

        A message no longer where it was listed (moved by an earlier attempt, or by another
        client) is left alone and not counted.
        """
        moving = [m for m in messages if m.folder != "trash"]
        moved: set[str] = set()
        async with self._session() as session:
            for folder in dict.fromkeys(m.folder for m in moving):
                validity = await session.select(folder)
                mine = [m for m in moving if m.folder == folder and _parse_id(m.id)[1] == validity]
                present = set(await session.search("UID", ",".join(str(_parse_id(m.id)[2]) for m in mine))) if mine else set()
                uids = [_parse_id(m.id)[2] for m in mine if _parse_id(m.id)[2] in present]
                if not uids:
                    continue
                await session.move(uids, "trash")
                moved |= {m.id for m in mine if _parse_id(m.id)[2] in uids}
        return moved

    def compose(self, key: str, *, to: Sequence[str], subject: str, body: str, now: datetime) -> EmailMessage:
        """The message write ``key`` sends: the same Message-ID on every attempt."""
        message = EmailMessage()
        message["From"] = self.account.address
        message["To"] = ", ".join(to)
        message["Subject"] = subject
        message["Date"] = format_datetime(now)
        message["Message-ID"] = message_id_for(key, self.account.address)
        message.set_content(body)
        return message

    async def sent_state(self, key: str) -> tuple[Literal["sent", "unknown", "not_sent"], RemoteMessage | None]:
        """Whether write ``key``'s message went out: in Sent (``sent``), still a draft (``unknown``), neither."""
        message_id = message_id_for(key, self.account.address)
        async with self._session() as session:
            found = await session.by_message_id("sent", message_id)
            if found is not None:
                return "sent", found
            drafted = await session.by_message_id("drafts", message_id)
        return ("unknown", drafted) if drafted is not None else ("not_sent", None)

    async def send(self, key: str, *, to: Sequence[str], subject: str, body: str, now: datetime) -> RemoteMessage:
        """Send write ``key``'s message once (see the module's contract); the copy in Sent.

        Raises :class:`SendUncertain` for an earlier attempt that stopped mid-way (nothing is
        sent again), :class:`SendRefused` when the SMTP server refuses it (nothing was sent).
        """
        state, found = await self.sent_state(key)
        if state == "sent" and found is not None:
            return found
        if state == "unknown":
            raise SendUncertain()
        message = self.compose(key, to=to, subject=subject, body=body, now=now)
        raw = message.as_bytes(policy=email.policy.SMTP)
        smtp = await self._smtp_connected()  # an SMTP server away or refusing the login: nothing is done yet
        try:
            async with self._session() as session:
                await session.append("drafts", raw, "(\\Draft \\Seen)")
        except BaseException:
            smtp.close()
            raise
        try:
            refused = await self._deliver(smtp, message, to)
        except SendRefused:
            await self._discard_draft(message["Message-ID"])
            raise
        try:
            async with self._session() as session:
                await session.append("sent", raw, "(\\Seen)")
                await self._remove_draft(session, message["Message-ID"])
                saved = await session.by_message_id("sent", message["Message-ID"])
        except ServerAway:
            saved = None  # sent; the copy stays in Drafts, and a retry says the outcome is unknown
        if saved is None:
            saved = RemoteMessage(id="", folder="sent", from_addr=self.account.address, to_addrs=tuple(to),
                                  subject=subject, at=now, is_read=True, message_id=message["Message-ID"], body=body)
        return replace(saved, refused=refused)

    async def _remove_draft(self, session: _Session, message_id: str) -> None:
        await session.select("drafts")
        await session.remove("drafts", await session.search("HEADER", "Message-ID", _quoted(message_id)))

    async def _discard_draft(self, message_id: str) -> None:
        async with self._session() as session:
            await self._remove_draft(session, message_id)

    async def _smtp_connected(self) -> aiosmtplib.SMTP:
        """An SMTP session, logged in: :class:`AccountRefused` or :class:`ServerAway` (nothing sent either way)."""
        address = await self._http.address(self._smtp.host, self._smtp.port)
        loop = asyncio.get_running_loop()
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(self._timeout):
                await loop.sock_connect(sock, (address, self._smtp.port))
        except (OSError, TimeoutError):
            sock.close()
            raise ServerAway(_SERVER) from None
        smtp = aiosmtplib.SMTP(hostname=self._smtp.host, sock=sock, use_tls=self._smtp.security == "tls",
                               start_tls=self._smtp.security == "starttls", tls_context=self._tls,
                               timeout=self._timeout)
        try:
            await smtp.connect()
            await smtp.login(self.account.username, self.account.password)
        except aiosmtplib.SMTPAuthenticationError:
            smtp.close()
            raise AccountRefused(_SERVER) from None
        except (aiosmtplib.SMTPException, OSError, TimeoutError, ssl.SSLError) as exc:
            smtp.close()
            if _certificate_refused(exc):
                raise EgressDenied("certificate_refused") from None
            raise ServerAway(_SERVER) from None
        return smtp

    @staticmethod
    async def _smtp_quit(smtp: aiosmtplib.SMTP) -> None:
        try:
            await smtp.quit()
        except (aiosmtplib.SMTPException, OSError, TimeoutError):
            smtp.close()

    async def _deliver(self, smtp: aiosmtplib.SMTP, message: EmailMessage, to: Sequence[str]) -> tuple[str, ...]:
        """Hand ``message`` to the SMTP server over ``smtp`` (then closed); the recipients it refused
        while taking the others.

        :class:`SendRefused` when it takes none, :class:`SendUncertain` when the connection ends
        before its answer (it may have taken it).
        """
        try:
            errors, _ = await smtp.send_message(message, sender=parseaddr(self.account.address)[1] or self.account.address,
                                                recipients=list(to))
        except (aiosmtplib.SMTPRecipientsRefused, aiosmtplib.SMTPSenderRefused, aiosmtplib.SMTPDataError) as exc:
            smtp.close()
            raise SendRefused(str(getattr(exc, "code", "") or "refused")) from None
        except (aiosmtplib.SMTPException, OSError, TimeoutError):
            smtp.close()
            raise SendUncertain() from None
        await self._smtp_quit(smtp)
        return tuple(_clip(address, 200) for address in errors)
