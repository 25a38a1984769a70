"""Fresh owners with the demo data, as every benchmark needs them."""

from __future__ import annotations

import uuid

from tollgate.graph.services import utc_now
from tollgate.graph.store.db import Database
from tollgate.graph.store.owner_scope import owner_transaction
from tollgate.tools.demo import seed_demo

__all__ = ["demo_owner"]


async def demo_owner(db: Database, prefix: str, timezone: str) -> str:
    """A new owner ``<prefix>-<random>`` with the demo data placed around now."""
    owner = f"{prefix}-{uuid.uuid4().hex[:6]}"
    async with owner_transaction(db.pool, owner) as conn:
        await seed_demo(conn, owner, utc_now(), timezone)
    return owner
