"""``GET /v1/me`` and ``PATCH /v1/me``: who the caller is, and the profile every surface uses for them."""

from __future__ import annotations

from fastapi import APIRouter

from graph.credentials import CredentialStore, credentials_cipher
from graph.profiles import Profile, get_profile, resolve, update_profile
from policies.errors import InvalidArgs, NotFound
from tools.connectors.accounts import connect_caldav, connected_caldav, disconnect_caldav
from tools.connectors.caldav import AccountRefused
from web.deps import PrincipalDep
from web.errors import documented
from web.schemas import AccountOut, AccountsOut, CalDavAccountIn, MeOut, MePatch, ProfileOut

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


@router.get("/accounts", summary="My connected accounts", responses=documented(401, 403, 429, 503))
async def read_accounts(principal: PrincipalDep) -> AccountsOut:
    """The accounts the caller connected (their address and login name; never a password)."""
    found = await connected_caldav(_store(principal), principal.owner_id)
    return AccountsOut(accounts=[AccountOut(kind="caldav", url=found.url, username=found.username)] if found else [])


@router.put("/accounts/caldav", summary="Connect my CalDAV calendar", responses=documented(401, 403, 422, 429, 503),
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
                                    plaintext_hosts=frozenset(svc.settings.connector_plaintext_hosts))
    except (AccountRefused, NotFound) as exc:
        raise InvalidArgs("account", [exc.message]) from None
    return AccountOut(kind="caldav", url=done.url, username=done.username)


@router.delete("/accounts/caldav", status_code=204, summary="Disconnect my CalDAV calendar",
               responses=documented(401, 403, 429, 503))
async def delete_caldav(principal: PrincipalDep) -> None:
    """Forget the caller's CalDAV account (nothing on their server changes)."""
    await disconnect_caldav(_store(principal), principal.owner_id)
