"""Owners' profiles: the timezone, locale and display name every surface uses for an owner.

Each field is the owner's own choice (``PATCH /v1/me``), else what their credential says (an
OIDC token's ``zoneinfo``, ``locale``, ``name``), else the server's default. What "today" and
"at 9am" mean for an owner therefore follows their profile on the web page, the API, the
terminal chat and background runs alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from psycopg import AsyncConnection

from tollgate.graph.state import LOCALE_TAG
from tollgate.graph.store.db import Database

__all__ = ["LOCALE_PATTERN", "Profile", "get_profile", "resolve", "timezone_of", "update_profile", "valid_timezone"]

LOCALE_PATTERN: Final = "^" + LOCALE_TAG + "$"
"""A BCP 47 language tag (``en``, ``fr-FR``, ``zh-Hant-TW``)."""
_LOCALE = re.compile(LOCALE_PATTERN)


@dataclass(frozen=True, slots=True)
class Profile:
    """What an owner set (``None``: not set)."""

    owner_id: str
    display_name: str | None = None
    timezone: str | None = None
    locale: str | None = None


def valid_timezone(name: str | None) -> bool:
    """Whether ``name`` is an IANA timezone this machine knows."""
    if not name or len(name) > 64:
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


async def get_profile(db: Database, owner_id: str) -> Profile:
    """The owner's profile (every field ``None`` when they set nothing)."""
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT owner_id, display_name, timezone, locale FROM owner_profiles WHERE owner_id = %s", (owner_id,)
        )
        row = await cur.fetchone()
    return Profile(**row) if row else Profile(owner_id=owner_id)


async def timezone_of(conn: AsyncConnection[Any], owner_id: str, default: str) -> str:
    """The owner's timezone on an open connection (a run the server starts on its own: a trigger's)."""
    cur = await conn.execute("SELECT timezone FROM owner_profiles WHERE owner_id = %s", (owner_id,))
    row = await cur.fetchone()
    return str(row["timezone"]) if row and row["timezone"] else default


_UNSET: Final[Any] = object()


async def update_profile(
    db: Database, owner_id: str, *, display_name: Any = _UNSET, timezone: Any = _UNSET, locale: Any = _UNSET
) -> Profile:
    """Set the given fields (``None`` clears one); raises :class:`ValueError` for an unknown timezone or a bad locale."""
    if timezone not in (_UNSET, None) and not valid_timezone(timezone):
        raise ValueError(f"unknown timezone {timezone!r}: use an IANA name such as Europe/Paris")
    if locale not in (_UNSET, None) and not _LOCALE.match(locale):
        raise ValueError("locale must be a language tag such as en, fr-FR")
    given = {"display_name": display_name, "timezone": timezone, "locale": locale}
    params = {name: None if value is _UNSET else value for name, value in given.items()}
    params |= {f"set_{name}": value is not _UNSET for name, value in given.items()}
    # One statement, each field kept unless given: two owners' tabs changing different fields lose neither.
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            """INSERT INTO owner_profiles AS p (owner_id, display_name, timezone, locale)
               VALUES (%(owner)s, %(display_name)s, %(timezone)s, %(locale)s)
               ON CONFLICT (owner_id) DO UPDATE SET
                   display_name = CASE WHEN %(set_display_name)s THEN EXCLUDED.display_name ELSE p.display_name END,
                   timezone = CASE WHEN %(set_timezone)s THEN EXCLUDED.timezone ELSE p.timezone END,
                   locale = CASE WHEN %(set_locale)s THEN EXCLUDED.locale ELSE p.locale END,
                   updated_at = now()
               RETURNING owner_id, display_name, timezone, locale""",
            {"owner": owner_id, **params},
        )
        row = await cur.fetchone()
    assert row is not None
    return Profile(**row)


def resolve(profile: Profile, *, claimed_timezone: str | None = None, claimed_locale: str | None = None,
            claimed_name: str = "", default_timezone: str = "UTC") -> tuple[str, str | None, str]:
    """(timezone, locale, display name): the profile's, else the credential's claims, else the defaults."""
    zone = profile.timezone or (claimed_timezone if valid_timezone(claimed_timezone) else None) or default_timezone
    locale = profile.locale or (claimed_locale if claimed_locale and _LOCALE.match(claimed_locale) else None)
    return zone, locale, profile.display_name or claimed_name
