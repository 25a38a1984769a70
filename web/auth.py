"""Bearer tokens: each maps to one owner; only their SHA-256 is stored.

A token is 32 random bytes (``tg_`` + URL-safe base64), so a plain SHA-256 is enough: there
is nothing to brute-force, and a leaked ``api_tokens`` table grants no access. The plaintext
exists once, in the return value of :func:`issue_token`.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from tollgate.graph.state import Context
from tollgate.graph.store.db import Database

__all__ = [
    "TOKEN_PREFIX", "TokenInfo", "TokenNotFound", "ensure_demo_token", "hash_token", "issue_token", "list_tokens",
    "owner_of_token", "owners_for_tokens", "revoke_token", "revoke_token_id", "well_formed",
]

TOKEN_PREFIX: Final = "tg_"
"""Every Tollgate bearer token starts with this (easy to spot in a secret scanner)."""
_MAX_TOKEN = 256
# A token's id is the start of its hash: enough to name it, nothing to authenticate with.
_ID_CHARS = 12
_MIN_ID_CHARS = 6


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A stored token as an operator sees it (never the token itself)."""

    id: str
    """The first characters of its SHA-256, which ``token revoke`` takes."""
    owner_id: str
    label: str
    created_at: datetime
    revoked_at: datetime | None


class TokenNotFound(LookupError):
    """No live token has this id, or more than one does (give more characters)."""


def hash_token(token: str) -> str:
    """The stored form of a token: lowercase hex SHA-256."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


async def issue_token(db: Database, owner_id: str, *, label: str = "") -> str:
    """Create a token for ``owner_id`` and return its plaintext (never stored)."""
    Context(owner_id=owner_id)  # the same owner-id rules as every run
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    async with db.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO api_tokens (token_hash, owner_id, label) VALUES (%s, %s, %s)",
            (hash_token(token), owner_id, label[:200]),
        )
    return token


async def ensure_demo_token(db: Database, owner: str = "demo") -> str:
    """A fresh token for the demo owner, for ``make run`` to print (earlier ones stay valid)."""
    return await issue_token(db, owner, label="demo")


async def revoke_token(db: Database, token: str) -> bool:
    """Revoke a token; ``True`` if it was live."""
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "UPDATE api_tokens SET revoked_at = now() WHERE token_hash = %s AND revoked_at IS NULL",
            (hash_token(token),),
        )
        return cur.rowcount == 1


def well_formed(token: str) -> bool:
    """Whether ``token`` could be a Tollgate token at all (anything else is refused unlooked-up)."""
    return 0 < len(token) <= _MAX_TOKEN and token.startswith(TOKEN_PREFIX)


async def owners_for_tokens(db: Database, tokens: Sequence[str]) -> list[str | None]:
    """The owner each live token maps to (``None`` if unknown, revoked or malformed), in one query."""
    hashes = [hash_token(token) if well_formed(token) else None for token in tokens]
    owners: dict[str, str] = {}
    if any(hashes):
        async with db.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT token_hash, owner_id FROM api_tokens WHERE token_hash = ANY(%s) AND revoked_at IS NULL",
                ([h for h in hashes if h],),
            )
            owners = {row["token_hash"]: str(row["owner_id"]) for row in await cur.fetchall()}
    return [owners.get(h) if h else None for h in hashes]


async def owner_of_token(db: Database, token: str) -> str | None:
    """The owner a live token maps to; ``None`` if it is unknown, revoked or malformed."""
    if not well_formed(token):
        return None
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT owner_id FROM api_tokens WHERE token_hash = %s AND revoked_at IS NULL", (hash_token(token),)
        )
        row = await cur.fetchone()
    return str(row["owner_id"]) if row else None


def _info(row: dict[str, object]) -> TokenInfo:
    return TokenInfo(
        id=str(row["token_hash"])[:_ID_CHARS], owner_id=str(row["owner_id"]), label=str(row["label"]),
        created_at=row["created_at"], revoked_at=row["revoked_at"],  # type: ignore[arg-type]
    )


async def list_tokens(db: Database, *, owner_id: str | None = None, revoked: bool = False) -> list[TokenInfo]:
    """The stored tokens (of one owner if given; revoked ones too if asked), oldest first."""
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT token_hash, owner_id, label, created_at, revoked_at FROM api_tokens"
            " WHERE (%(owner)s::text IS NULL OR owner_id = %(owner)s) AND (%(revoked)s OR revoked_at IS NULL)"
            " ORDER BY created_at, token_hash",
            {"owner": owner_id, "revoked": revoked},
        )
        return [_info(row) for row in await cur.fetchall()]


async def revoke_token_id(db: Database, token_id: str) -> TokenInfo:
    """Revoke the one live token whose id starts with ``token_id`` (at least 6 hex characters).

    Raises :class:`TokenNotFound` when no live token, or more than one, matches.
    """
    prefix = token_id.strip().lower()
    if len(prefix) < _MIN_ID_CHARS or any(c not in "0123456789abcdef" for c in prefix):
        raise TokenNotFound(f"a token id is {_MIN_ID_CHARS} or more hex characters, as `tollgate token list` shows")
    async with db.pool.connection() as conn, conn.transaction():
        cur = await conn.execute(
            "SELECT token_hash FROM api_tokens WHERE starts_with(token_hash, %s) AND revoked_at IS NULL FOR UPDATE",
            (prefix,),
        )
        rows = await cur.fetchall()
        if len(rows) != 1:
            raise TokenNotFound(
                f"no live token has id {prefix}" if not rows else f"{len(rows)} live tokens start with {prefix}: give more of the id"
            )
        cur = await conn.execute(
            "UPDATE api_tokens SET revoked_at = now() WHERE token_hash = %s"
            " RETURNING token_hash, owner_id, label, created_at, revoked_at",
            (rows[0]["token_hash"],),
        )
        row = await cur.fetchone()
    assert row is not None
    return _info(row)
