"""Connecting an owner's own account: checked against its server first, then stored encrypted.

Used by ``tollgate account add`` (an operator, for an owner) and ``PUT /v1/me/accounts/caldav``
(the owner). Nothing is stored for a login the server refuses, an address that is not a
calendar, or a plain-text address the operator did not allow (``TOLLGATE_CONNECTOR_PLAINTEXT_HOSTS``);
the password is stored only through the encrypted credentials of the calendar tool and is never
returned, logged or echoed in an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfo

from graph.credentials import CredentialStore
from graph.egress_transport import EgressClient
from tools.connectors.caldav import CalDavAccount, CalDavCalendar
from tools.connectors.caldav_calendar import ACCOUNT_NAMES

__all__ = ["ConnectedAccount", "connect_caldav", "connected_caldav", "disconnect_caldav"]

_TOOL = "calendar"


@dataclass(frozen=True, slots=True)
class ConnectedAccount:
    """What is shown of a connected account: never its password."""

    kind: str
    url: str
    username: str


async def connect_caldav(store: CredentialStore, http: EgressClient, owner_id: str, *, url: str, username: str,
                         password: str, plaintext_hosts: frozenset[str] = frozenset()) -> ConnectedAccount:
    """Log in to the calendar at ``url``; store the account for ``owner_id`` only if that worked.

    Raises the connector's refusals unchanged (:class:`~tools.connectors.caldav.AccountRefused`,
    :class:`~policies.errors.NotFound`, :class:`~policies.errors.EgressDenied`,
    :class:`~policies.errors.Unavailable`), having stored nothing.
    """
    if not (url and username and password):
        raise ValueError("a CalDAV account needs its calendar's address, a username and a password")
    calendar = CalDavCalendar(http, CalDavAccount(url, username, password, plaintext_hosts), ZoneInfo("UTC"))
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
