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
  account's host and port (:meth:`tools.perimeter.egress_transport.EgressClient.address`); TLS is verified
  against the host name, and a certificate that does not verify is refused
  (:class:`~policies.errors.EgressDenied`, ``certificate_refused``). A server that cannot be
  reached is :class:`~tools.connectors.errors.ServerAway` (transient).
* **Hostile servers.** Bodies are fetched up to a cap, headers are decoded by the standard
  library's parser and clipped, responses that do not parse are skipped.

The protocols are in :mod:`tools.connectors.imap_session` (IMAP) and :mod:`tools.connectors.smtp`;
``aioimaplib`` (asyncio, maintained) over ``imapclient`` (blocking, a thread per call), and
``aiosmtplib`` for SMTP: it takes a connected socket, which is how the pinned address reaches it.
"""

from __future__ import annotations

import email.policy
import re
import ssl
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Final, Literal
from urllib.parse import urlsplit

from tollgate.tools.perimeter.egress_transport import EgressClient
from tollgate.policies.errors import EgressDenied, Unavailable
from tollgate.tools.connectors.errors import ServerAway
from tollgate.tools.connectors.imap_session import (
    SERVER,
    Folder,
    ImapSession,
    MessageGone,
    RemoteMessage,
    open_session,
    parse_message_id,
    quoted,
    searchable,
)
from tollgate.tools.connectors.smtp import AnswerLost, SendRefused, Submission

__all__ = ["ImapMailbox", "MailAccount", "SendUncertain", "message_id_for"]

_NAMESPACE: Final = uuid.UUID("0f4f3c2a-6a55-4d55-8d3c-6f0a8e1b7c21")  # Tollgate's, for Message-IDs from keys
_SCAN: Final = 200  # newest messages filtered here when the server cannot search the text
_PORTS: Final = {"imaps": 993, "imap": 143, "smtps": 465, "smtp+starttls": 587, "smtp": 25}


class SendUncertain(Unavailable):
    """A send stopped between saving its draft and saving it to Sent: it may have gone out.

    It is never sent again by Tollgate; the draft stays for the owner to check.
    """

    def __init__(self) -> None:
        super().__init__(SERVER, "the message may or may not have been sent (it is in your Drafts folder); "
                                 "it was not sent again, check with the recipient before sending it yourself")


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
    private_network: bool = False
    """The operator allowed this account's servers on a LAN (``TOLLGATE_CONNECTOR_PRIVATE_NETWORKS``)."""

    def __repr__(self) -> str:  # the password never reaches a log through a repr
        return (f"MailAccount(imap_url={self.imap_url!r}, smtp_url={self.smtp_url!r}, username={self.username!r}, "
                f"address={self.address!r}, password='***')")


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


class ImapMailbox:
    """One owner's mailbox over IMAP and their outgoing server over SMTP, through ``http``'s egress gate."""

    def __init__(self, http: EgressClient, account: MailAccount, *, tls: ssl.SSLContext | None = None) -> None:
        """``tls`` verifies the servers' certificates: the system's authorities unless given (a test's own)."""
        self.account = account
        self._tls = tls or ssl.create_default_context()
        self._imap = _endpoint(account.imap_url, ("imaps", "imap"), account.plaintext_hosts)
        self._smtp = _endpoint(account.smtp_url, ("smtps", "smtp+starttls", "smtp"), account.plaintext_hosts)
        self._http = http.for_hosts(*(f"[{e.host}]:{e.port}" if ":" in e.host else f"{e.host}:{e.port}"
                                      for e in (self._imap, self._smtp)), private_network=account.private_network)
        self._timeout = http.limits.timeout_seconds

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[ImapSession]:
        """A logged-in IMAP session at the address the gate checked (:func:`~tools.connectors.imap_session.open_session`)."""
        address = await self._http.address(self._imap.host, self._imap.port)
        tls = self._tls if self._imap.security == "tls" else None
        async with open_session(address, self._imap.host, self._imap.port, tls, self.account.username,
                                self.account.password, self._timeout) as session:
            yield session

    async def check(self) -> None:
        """Log in to both servers once: :class:`AccountRefused` for a bad login, :class:`ServerAway` when one
        cannot be reached."""
        async with self._session() as session:
            await session.select("inbox")
        submission = await self._submission()
        await submission.quit(await submission.connect())

    async def list(self, folder: Folder, *, unread_only: bool = False, contains: str | None = None,
                   limit: int = 10) -> tuple[list[RemoteMessage], bool]:
        """Up to ``limit`` messages of ``folder``, newest first, and whether there are more.

        ``contains`` matches the sender (the recipients in ``sent``), searched by the server;
        text it cannot search (outside ASCII) is matched here among the newest messages.
        """
        criteria = ["UNSEEN"] if unread_only and folder != "sent" else []
        local = None
        if contains:
            if searchable(contains):
                criteria += ["TO" if folder == "sent" else "FROM", quoted(contains)]
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
        folder, validity, uid = parse_message_id(message_id)
        async with self._session() as session:
            if await session.select(folder) != validity:
                raise MessageGone(message_id)
            return await session.body(folder, validity, uid)

    async def still_there(self, ids: Sequence[str]) -> dict[str, RemoteMessage]:
        """Those of the messages ``ids`` name that are still where they were listed (headers and flags), by id."""
        wanted = [parse_message_id(i) for i in ids]
        found: dict[str, RemoteMessage] = {}
        async with self._session() as session:
            for folder in dict.fromkeys(f for f, _, _ in wanted):
                validity = await session.select(folder)
                uids = [u for f, v, u in wanted if f == folder and v == validity]
                found |= {m.id: m for m in await session.headers(folder, validity, uids)}
        return found

    async def messages(self, ids: Sequence[str]) -> list[RemoteMessage]:
        """The messages ``ids`` name, in order (headers and flags); :class:`NotFound` if one is gone."""
        found = await self.still_there(ids)
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
                ids = [parse_message_id(m.id) for m in unread if m.folder == folder]
                await session.mark_seen([uid for _, held, uid in ids if held == validity])
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
                listed = [(parse_message_id(m.id), m.id) for m in moving if m.folder == folder]
                mine = {uid: message_id for (_, held, uid), message_id in listed if held == validity}
                present = [uid for uid in await session.search("UID", ",".join(map(str, mine))) if uid in mine] if mine else []
                if present:
                    await session.move(present, "trash")
                    moved |= {mine[uid] for uid in present}
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
        submission = await self._submission()
        smtp = await submission.connect()  # an SMTP server away or refusing the login: nothing is done yet
        # Drafts and Sent each get a session of their own, not one held across the hand-over: a
        # session's time bound must never cut the SMTP delivery short (it would look undelivered).
        try:
            async with self._session() as session:
                await session.append("drafts", raw, "(\\Draft \\Seen)")
        except BaseException:
            smtp.close()
            raise
        try:
            refused = await submission.deliver(smtp, message, self.account.address, to)
        except SendRefused:
            await self._discard_draft(message["Message-ID"])
            raise
        except AnswerLost:
            raise SendUncertain() from None
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

    async def _remove_draft(self, session: ImapSession, message_id: str) -> None:
        await session.select("drafts")
        await session.remove("drafts", await session.search("HEADER", "Message-ID", quoted(message_id)))

    async def _discard_draft(self, message_id: str) -> None:
        async with self._session() as session:
            await self._remove_draft(session, message_id)

    async def _submission(self) -> Submission:
        address = await self._http.address(self._smtp.host, self._smtp.port)
        return Submission(address, self._smtp.host, self._smtp.port, self._smtp.security, self._tls,
                          self.account.username, self.account.password, self._timeout)
