"""Tollgate's own bearer tokens (``tollgate token create``), stored as SHA-256 hashes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tollgate.graph.store.db import Database
from tollgate.web.auth import owner_of_token
from tollgate.web.identity import Identity, bearer_token

__all__ = ["StoredTokens"]


@dataclass(frozen=True, slots=True)
class StoredTokens:
    """Authenticates a live stored token; it grants every route of its owner."""

    db: Database

    async def authenticate(self, headers: Mapping[str, str]) -> Identity | None:
        token = bearer_token(headers)
        if token is None:
            return None
        owner = await owner_of_token(self.db, token)
        return Identity(owner_id=owner, all_scopes=True) if owner is not None else None

    async def aclose(self) -> None:
        return None
