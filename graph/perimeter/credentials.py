"""Per-owner secrets of tools, encrypted at rest: what ``ExecContext.credentials`` reads.

Values are encrypted with Fernet (``cryptography``: AES-128-CBC with HMAC-SHA256, a standard
authenticated scheme, rather than anything hand-made). The key is ``TOLLGATE_CREDENTIALS_KEY``
(a Fernet key: ``python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"``);
in development, without one, it is derived from the approval key with HKDF, so a fresh clone
works and the two keys never coincide. Production refuses to store or read secrets without
its own key. A tool reads only its own secrets of the owner its call acts for; values never
appear in logs, errors, reprs or audit rows.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any, Final

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from psycopg_pool import AsyncConnectionPool

from tollgate.graph.settings import Settings
from tollgate.graph.store import owner_scope
from tollgate.policies.errors import Unavailable

__all__ = ["CredentialStore", "OwnerCredentials", "credentials_cipher"]

_NAME: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_MAX_VALUE: Final = 16_384
_GET: Final = "SELECT ciphertext FROM owner_credentials WHERE owner_id = %s AND tool = %s AND name = %s"
_SET: Final = """INSERT INTO owner_credentials (owner_id, tool, name, ciphertext) VALUES (%s, %s, %s, %s)
                 ON CONFLICT (owner_id, tool, name) DO UPDATE SET ciphertext = EXCLUDED.ciphertext, updated_at = now()"""
_DELETE: Final = "DELETE FROM owner_credentials WHERE owner_id = %s AND tool = %s AND name = %s"
_NAMES: Final = "SELECT tool, name, updated_at FROM owner_credentials WHERE owner_id = %s ORDER BY tool, name"


class CredentialsUnavailable(Unavailable):
    """Secrets cannot be stored or read (no key in production, or a key that does not match)."""

    def __init__(self, why: str) -> None:
        super().__init__("the credentials store")
        self.message = f"the tool's stored credentials cannot be used: {why}"


def credentials_cipher(settings: Settings, approval_key: bytes) -> Fernet | None:
    """The Fernet of ``settings`` (``None`` in production without ``TOLLGATE_CREDENTIALS_KEY``)."""
    if settings.credentials_key is not None:
        try:
            return Fernet(settings.credentials_key.get_secret_value().encode())
        except ValueError:
            raise CredentialsUnavailable("TOLLGATE_CREDENTIALS_KEY is not a Fernet key") from None
    if settings.environment == "production":
        return None
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"tollgate credentials v1").derive(approval_key)
    return Fernet(base64.urlsafe_b64encode(derived))


def _check_name(kind: str, value: str) -> None:
    if not _NAME.match(value):
        raise ValueError(f"a credential {kind} must be 1-64 letters, digits, '_', '.' or '-'")


@dataclass(frozen=True, slots=True)
class CredentialStore:
    """Stores and reads owners' secrets, encrypted."""

    pool: AsyncConnectionPool[Any]
    cipher: Fernet | None = field(repr=False)

    def _fernet(self) -> Fernet:
        if self.cipher is None:
            raise CredentialsUnavailable("set TOLLGATE_CREDENTIALS_KEY (production needs its own key)")
        return self.cipher

    async def set(self, owner_id: str, tool: str, name: str, value: str) -> None:
        """Store (or replace) the secret ``name`` of ``tool`` for ``owner_id``."""
        _check_name("tool", tool)
        _check_name("name", name)
        if not value or len(value) > _MAX_VALUE:
            raise ValueError(f"a credential value must be 1-{_MAX_VALUE} characters")
        token = self._fernet().encrypt(value.encode())
        async with owner_scope.owner_transaction(self.pool, owner_id) as conn:
            await conn.execute(_SET, (owner_id, tool, name, token))

    async def delete(self, owner_id: str, tool: str, name: str) -> bool:
        """Forget a secret; whether there was one."""
        async with owner_scope.owner_transaction(self.pool, owner_id) as conn:
            cur = await conn.execute(_DELETE, (owner_id, tool, name))
            return cur.rowcount > 0

    async def names(self, owner_id: str) -> list[tuple[str, str]]:
        """(tool, name) of every secret the owner has stored; never the values."""
        async with owner_scope.owner_reads(self.pool, owner_id) as conn:
            cur = await conn.execute(_NAMES, (owner_id,))
            return [(r["tool"], r["name"]) for r in await cur.fetchall()]

    async def read(self, owner_id: str, tool: str, name: str) -> str | None:
        """The secret, or ``None`` when not stored. Raises :class:`CredentialsUnavailable` for a key that does not open it."""
        async with owner_scope.owner_reads(self.pool, owner_id) as conn:
            cur = await conn.execute(_GET, (owner_id, tool, name))
            row = await cur.fetchone()
        if row is None:
            return None
        try:
            return self._fernet().decrypt(bytes(row["ciphertext"])).decode()
        except InvalidToken:
            raise CredentialsUnavailable("they were stored with another key") from None

    def bound(self, owner_id: str, tool: str) -> OwnerCredentials:
        """The accessor one call of ``tool`` for ``owner_id`` gets."""
        return OwnerCredentials(self, owner_id, tool)


@dataclass(frozen=True, slots=True)
class OwnerCredentials:
    """One owner's secrets for one tool (:class:`tools.registry.Credentials`)."""

    store: CredentialStore = field(repr=False)
    owner_id: str
    tool: str

    async def get(self, name: str) -> str | None:
        """The secret called ``name``, or ``None``."""
        return await self.store.read(self.owner_id, self.tool, name)
