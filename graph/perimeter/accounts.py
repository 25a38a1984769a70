"""Connecting an owner's own account: checked against its server first, then stored encrypted.

Used by ``tollgate account add`` (an operator, for an owner) and ``PUT /v1/me/accounts/{kind}``
(the owner), for a CalDAV calendar (``caldav``) or an IMAP mailbox with its SMTP server
(``imap``). Nothing is stored for a login a server refuses, an address that is not a calendar,
or a plain-text address the operator did not allow (``TOLLGATE_CONNECTOR_PLAINTEXT_HOSTS``); the
password is stored only through the encrypted credentials of the tool (calendar, mail) and is
never returned, logged or echoed in an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfo

from tollgate.graph.perimeter.credentials import CredentialStore
from tollgate.tools.perimeter.egress_transport import EgressClient
from tollgate.tools.connectors.caldav import CalDavAccount, CalDavCalendar
from tollgate.tools.connectors.caldav_calendar import ACCOUNT_NAMES
from tollgate.tools.connectors.imap import ImapMailbox, MailAccount
from tollgate.tools.connectors.imap_mail import ACCOUNT_NAMES as MAIL_ACCOUNT_NAMES

__all__ = ["ConnectedAccount", "connect_caldav", "connect_imap", "connected", "connected_caldav", "disconnect",
           "disconnect_caldav"]

_TOOL = "calendar"


@dataclass(frozen=True, slots=True)
class ConnectedAccount:
    """What is shown of a connected account: never its password."""

    kind: str
    url: str
    """The calendar's address, or the IMAP server's."""
    username: str
    smtp_url: str = ""
    """For ``imap``: the outgoing server."""
    address: str = ""
    """For ``imap``: the owner's address, the ``From`` of what they send."""


async def connect_caldav(store: CredentialStore, http: EgressClient, owner_id: str, *, url: str, username: str,
                         password: str, plaintext_hosts: frozenset[str] = frozenset(),
                         private_network: bool = False) -> ConnectedAccount:
    """Log in to the calendar at ``url``; store the account for ``owner_id`` only if that worked.

    Raises the connector's refusals unchanged (:class:`~tools.connectors.caldav.AccountRefused`,
    :class:`~policies.errors.NotFound`, :class:`~policies.errors.EgressDenied`,
    :class:`~policies.errors.Unavailable`), having stored nothing.
    """
    if not (url and username and password):
        raise ValueError("a CalDAV account needs its calendar's address, a username and a password")
    calendar = CalDavCalendar(http, CalDavAccount(url, username, password, plaintext_hosts, private_network),
                              ZoneInfo("UTC"))
    await calendar.check()
    for name, value in zip(ACCOUNT_NAMES, (calendar.url, username, password), strict=True):
        await store.set(owner_id, _TOOL, name, value)
    return ConnectedAccount("caldav", calendar.url, username)


async def connected_caldav(store: CredentialStore, owner_id: str) -> ConnectedAccount | None:
    """The owner's CalDAV account, if one is connected (address and username only)."""
    url, username = await store.read(owner_id, _TOOL, "caldav_url"), await store.read(owner_id, _TOOL, "caldav_username")
    return ConnectedAccount("caldav", url, username) if url and username else None


async def disconnect_caldav(store: CredentialStore, owner_id: str) -> bool:
    """Forget the owner's CalDAV account; whether there was one."""
    gone = [await store.delete(owner_id, _TOOL, name) for name in ACCOUNT_NAMES]
    return any(gone)


async def connect_imap(store: CredentialStore, http: EgressClient, owner_id: str, *, imap_url: str, smtp_url: str,
                       username: str, password: str, address: str,
                       plaintext_hosts: frozenset[str] = frozenset(), private_network: bool = False) -> ConnectedAccount:
    """Log in to the IMAP and SMTP servers; store the account for ``owner_id`` only if both worked.

    Raises the connector's refusals unchanged (:class:`~tools.connectors.errors.AccountRefused`,
    :class:`~tools.connectors.errors.ServerAway`, :class:`~policies.errors.EgressDenied`), having stored nothing.
    """
    if not (imap_url and smtp_url and username and password and "@" in address):
        raise ValueError("a mail account needs its IMAP and SMTP addresses, a username, a password and the owner's address")
    await ImapMailbox(http, MailAccount(imap_url, smtp_url, username, password, address, plaintext_hosts,
                                        private_network)).check()
    for name, value in zip(MAIL_ACCOUNT_NAMES, (imap_url, smtp_url, username, password, address), strict=True):
        await store.set(owner_id, "mail", name, value)
    return ConnectedAccount("imap", imap_url, username, smtp_url, address)


async def connected(store: CredentialStore, owner_id: str) -> list[ConnectedAccount]:
    """Every account the owner connected (addresses and usernames only)."""
    found = [a for a in [await connected_caldav(store, owner_id)] if a is not None]
    imap_url, smtp_url, username, address = [await store.read(owner_id, "mail", n)
                                             for n in ("imap_url", "smtp_url", "mail_username", "mail_address")]
    if imap_url and username:
        found.append(ConnectedAccount("imap", imap_url, username, smtp_url or "", address or ""))
    return found


async def disconnect(store: CredentialStore, owner_id: str, kind: str) -> bool:
    """Forget the owner's ``kind`` account (``caldav`` or ``imap``); whether there was one."""
    if kind == "caldav":
        return await disconnect_caldav(store, owner_id)
    if kind != "imap":
        raise ValueError(f"no such kind of account: {kind!r} (caldav or imap)")
    gone = [await store.delete(owner_id, "mail", name) for name in MAIL_ACCOUNT_NAMES]
    return any(gone)
