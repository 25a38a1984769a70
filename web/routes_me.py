"""``GET /v1/me`` and ``PATCH /v1/me``: who the caller is, and the profile every surface uses for them."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter

from tollgate.graph.perimeter.credentials import CredentialStore, credentials_cipher
from tollgate.graph.profiles import Profile, get_profile, resolve, update_profile
from tollgate.graph.settings import Settings
from tollgate.policies.errors import InvalidArgs, NotFound
from tollgate.graph.perimeter.accounts import ConnectedAccount, connect_caldav, connect_imap, connected, disconnect
from tollgate.tools.connectors.errors import AccountRefused
from tollgate.web.deps import PrincipalDep
from tollgate.web.errors import documented
from tollgate.web.schemas import AccountOut, AccountsOut, CalDavAccountIn, ImapAccountIn, MeOut, MePatch, ProfileOut

__all__ = ["router"]

router = APIRouter(prefix="/v1/me", tags=["me"])


def _me(principal: PrincipalDep, profile: Profile) -> MeOut:
    identity = principal.identity
    zone, locale, name = resolve(profile, claimed_timezone=identity.timezone, claimed_locale=identity.locale,
                                 claimed_name=identity.display_name,
                                 default_timezone=principal.server.settings.default_timezone)
    return MeOut(owner_id=principal.owner_id, display_name=name, timezone=zone, locale=locale,
                 scopes=sorted(identity.scopes),
                 profile=ProfileOut(display_name=profile.display_name, timezone=profile.timezone,
                                    locale=profile.locale))


@router.get("", summary="Who am I", responses=documented(401, 403, 429, 503))
async def read_me(principal: PrincipalDep) -> MeOut:
    """The caller's owner id; the timezone, locale and name in effect for them (their profile's, else
    their token's claims, else the server's defaults) and what they set themselves; their scopes."""
    return _me(principal, await get_profile(principal.app.services.db, principal.owner_id))


@router.patch("", summary="Set my timezone, locale or name", responses=documented(401, 403, 422, 429, 503))
async def update_me(body: MePatch, principal: PrincipalDep) -> MeOut:
    """Set the fields given (``null`` clears one: back to the token's claim or the server's default).

    From the next request on, "today", "tomorrow at 9" and every time shown follow the new
    timezone, on every surface. An unknown timezone or a malformed locale is refused (422) and
    changes nothing.
    """
    given = {name: getattr(body, name) for name in body.model_fields_set}
    try:
        profile = await update_profile(principal.app.services.db, principal.owner_id, **given)
    except ValueError as exc:
        raise InvalidArgs("me", [str(exc)]) from None
    return _me(principal, profile)


def _store(principal: PrincipalDep) -> CredentialStore:
    svc = principal.app.services
    return svc.credentials or CredentialStore(svc.db.pool, credentials_cipher(svc.settings, svc.key()))


def _account(found: ConnectedAccount) -> AccountOut:
    if found.kind == "imap":
        return AccountOut(kind="imap", url=found.url, username=found.username, smtp_url=found.smtp_url,
                          address=found.address)
    return AccountOut(kind="caldav", url=found.url, username=found.username)


@router.get("/accounts", summary="My connected accounts", responses=documented(401, 403, 429, 503),
            response_model_exclude_none=True)
async def read_accounts(principal: PrincipalDep) -> AccountsOut:
    """The accounts the caller connected (their addresses and login name; never a password)."""
    return AccountsOut(accounts=[_account(a) for a in await connected(_store(principal), principal.owner_id)])


def _on_lan(settings: Settings, owner_id: str, kind: str) -> bool:
    """Whether the operator allowed this owner's ``kind`` account on a LAN (never the owner's own say)."""
    return kind in settings.connector_private_networks.get(owner_id, [])


@router.put("/accounts/caldav", summary="Connect my CalDAV calendar", responses=documented(401, 403, 422, 429, 503),
            response_model_exclude_none=True,
            # Valid data may still be refused: the login is tried on the owner's server (tests/test_schemathesis.py).
            openapi_extra={"x-tollgate-checked-elsewhere": True})
async def put_caldav(body: CalDavAccountIn, principal: PrincipalDep) -> AccountOut:
    """Log in to the calendar at ``url`` and, only if that works, store the account (encrypted).

    A refused login, an address that is not a calendar, or plain ``http://`` to a host the
    operator did not allow is refused (422) and stores nothing; the answer never holds the password.
    """
    svc = principal.app.services
    try:
        done = await connect_caldav(_store(principal), svc.http(), principal.owner_id, url=body.url,
                                    username=body.username, password=body.password,
                                    plaintext_hosts=frozenset(svc.settings.connector_plaintext_hosts),
                                    private_network=_on_lan(svc.settings, principal.owner_id, "caldav"))
    except (AccountRefused, NotFound) as exc:
        raise InvalidArgs("account", [exc.message]) from None
    return _account(done)


@router.put("/accounts/imap", summary="Connect my mailbox (IMAP and SMTP)",
            responses=documented(401, 403, 422, 429, 503), response_model_exclude_none=True,
            # Valid data may still be refused: the login is tried on the owner's servers (tests/test_schemathesis.py).
            openapi_extra={"x-tollgate-checked-elsewhere": True})
async def put_imap(body: ImapAccountIn, principal: PrincipalDep) -> AccountOut:
    """Log in to the IMAP and SMTP servers and, only if both work, store the account (encrypted).

    A refused login, a server that cannot be reached, or plain text to a host the operator did
    not allow is refused (422, or 503 for a server away) and stores nothing; the answer never
    holds the password.
    """
    svc = principal.app.services
    try:
        done = await connect_imap(_store(principal), svc.http(), principal.owner_id, imap_url=body.imap_url,
                                  smtp_url=body.smtp_url, username=body.username, password=body.password,
                                  address=body.address, plaintext_hosts=frozenset(svc.settings.connector_plaintext_hosts),
                                  private_network=_on_lan(svc.settings, principal.owner_id, "imap"))
    except AccountRefused as exc:
        raise InvalidArgs("account", [exc.message]) from None
    return _account(done)


@router.delete("/accounts/{kind}", status_code=204, summary="Disconnect my calendar or mailbox",
               responses=documented(401, 403, 422, 429, 503))
async def delete_account(kind: Literal["caldav", "imap"], principal: PrincipalDep) -> None:
    """Forget the caller's ``caldav`` or ``imap`` account (nothing on their servers changes)."""
    await disconnect(_store(principal), principal.owner_id, kind)
