"""The collaborators a turn needs, passed into :func:`graph.turn.build_graph`.

Nodes never reach for module globals: the database, registry, models, clock and approval key
all come from one :class:`Services` value (or a provider that builds it lazily, for Studio).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from langchain_core.language_models import BaseChatModel
from psycopg import AsyncConnection

from tollgate.tools.perimeter.config import egress_client
from tollgate.graph.perimeter.credentials import CredentialStore, credentials_cipher
from tollgate.tools.perimeter.egress_transport import EgressClient
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database
from tollgate.policies.approval_rules import ApprovalRules
from tollgate.tools.registry import ExecContext, Registry

__all__ = ["Hooks", "Services", "ServicesProvider", "utc_now"]


def utc_now() -> datetime:
    """The real clock."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Hooks:
    """Observation points for operations and fault-injection tests (no behaviour of their own)."""

    after_effect_commit: Callable[[str], None] | None = None
    """Called with the idempotency key right after a write and its ledger row commit."""
    inside_effect: Callable[[str], Awaitable[None]] | None = None
    """Awaited with the idempotency key inside a write's transaction, just before its executor runs."""
    before_remote_call: Callable[[str], Awaitable[None]] | None = None
    """Awaited with the idempotency key once a remote write's intent is committed, before its call
    (where a process that stalls would come back after its lease ran out)."""


@dataclass(frozen=True, slots=True)
class Services:
    """Everything the turn graph uses besides its state and context."""

    settings: Settings
    """Configuration."""
    db: Database
    """The database (pool shared with the checkpointer)."""
    registry: Registry
    """The enabled tools."""
    picker_model: BaseChatModel
    """The model that chooses tool calls (the offline picker when none is configured)."""
    naturalizer_model: BaseChatModel | None = None
    """The model that phrases replies from results; ``None`` means grounded renderers."""
    clock: Callable[[], datetime] = utc_now
    """The server clock (aware datetimes)."""
    hooks: Hooks = field(default_factory=Hooks)
    """Observation hooks."""
    approval_key: bytes = b""
    """HMAC key for approval tokens (from settings when empty)."""
    egress: EgressClient | None = None
    """HTTP for tools through the egress gate (from settings when ``None``)."""
    credentials: CredentialStore | None = None
    """Owners' tool secrets (from settings and the approval key when ``None``)."""
    approval_rules: ApprovalRules = field(default_factory=ApprovalRules)
    """The deployment's per-action approval rules."""

    def key(self) -> bytes:
        """The approval key."""
        return self.approval_key or self.settings.approval_key()

    def exec_context(
        self, owner_id: str, timezone: str, tool: str, conn: AsyncConnection[Any] | None, key: str | None = None,
        *, labels: Mapping[str, str] | None = None,
    ) -> ExecContext:
        """What one call of ``tool`` (an executor, a preview, a reconcile hook) gets: the owner it acts
        for, the clock, ``conn`` (for tools that asked for the database), the write's idempotency key,
        HTTP through the egress gate, that owner's secrets of that tool only, and the tool's service
        for that owner (:attr:`~tools.registry.ToolSpec.service_for`)."""
        store = self.credentials or CredentialStore(self.db.pool, credentials_cipher(self.settings, self.key()))
        spec = self.registry.tool(tool)
        service = spec.service_for(owner_id) if spec is not None and spec.service_for is not None else None
        return ExecContext(owner_id, timezone, self.clock(), conn, key, http=self.http(),
                           credentials=store.bound(owner_id, tool), labels=labels or {}, service=service)

    def http(self) -> EgressClient:
        """The tools' HTTP client (``ExecContext.http``)."""
        return self.egress if self.egress is not None else egress_client(self.settings)


ServicesProvider = Callable[[], Awaitable[Services]]
"""Returns the services; lets Studio build them lazily inside its own event loop."""
