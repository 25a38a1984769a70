"""A built-in tool on another store, chosen per owner by a setting.

``TOLLGATE_<TOOL>_BACKEND`` names the deployment's store for a tool (``builtin``: Tollgate's own
tables) and ``TOLLGATE_<TOOL>_BACKEND_OWNERS`` overrides it per owner. :func:`on_stores` gives a
tool the same actions, previews, summaries and approvals on whichever store the call's owner
uses; the choice is a setting, not a lookup, so an owner on the built-in store pays no query.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from tollgate.tools.registry import ActionSpec, ExecContext, IdKind, Reconciled, Reconciler, ToolSpec

__all__ = ["ServerHook", "backend_of", "backends_chosen", "on_stores", "private_network_owners"]


def backend_of(settings: Mapping[str, Any], tool: str, owner_id: str) -> str:
    """The store ``owner_id``'s ``tool`` uses: the owner's own setting, else the deployment's, else ``builtin``."""
    owners = settings.get(f"{tool}_backend_owners") or {}
    return str(owners.get(owner_id) or settings.get(f"{tool}_backend") or "builtin")


def backends_chosen(settings: Mapping[str, Any], tool: str) -> set[str]:
    """Every store some owner of ``tool`` uses."""
    return {settings.get(f"{tool}_backend") or "builtin", *(settings.get(f"{tool}_backend_owners") or {}).values()}


def private_network_owners(settings: Mapping[str, Any], kind: str) -> frozenset[str]:
    """The owners whose own ``kind`` account (``caldav``, ``imap``) the operator allowed on a LAN
    (``TOLLGATE_CONNECTOR_PRIVATE_NETWORKS``)."""
    chosen = settings.get("connector_private_networks") or {}
    return frozenset(owner for owner, kinds in chosen.items() if kind in kinds)


StoreFor = Callable[[ExecContext], Awaitable[Any]]
"""The store of the call's owner (raising a typed error when it cannot be reached or is not set up)."""


ServerHook = Callable[[ExecContext, Any, Any], Awaitable[Reconciled]]
"""Whether a write happened, asked of the owner's own server: ``(ctx, args, store)``."""


def on_stores(tool: ToolSpec, store_for: StoreFor, runs: Mapping[str, Callable[..., Awaitable[Any]]],
              previews: Mapping[str, Callable[..., Awaitable[Any]]], *, on_server: Callable[[str], bool],
              kind: IdKind, hooks: Mapping[str, ServerHook]) -> ToolSpec:
    """``tool`` with each action's executor (``runs``) and preview (``previews``) called on
    ``store_for(ctx)`` as their third argument.

    For an owner on their own server (``on_server``) every action leaves Tollgate
    (``remote_for``), the tool's ids are of ``kind`` (``kinds_for``), and a write after a crash
    is reconciled by its hook in ``hooks``, given the server's store.
    """

    def on_store(run: Callable[..., Awaitable[Any]]) -> Callable[[ExecContext, Any], Awaitable[Any]]:
        async def call(ctx: ExecContext, args: Any) -> Any:
            return await run(ctx, args, await store_for(ctx))
        return call

    def reconcile(hook: ServerHook) -> Reconciler:
        async def call(ctx: ExecContext, args: Any) -> Reconciled:
            if not on_server(ctx.owner_id):
                return Reconciled.unknown()  # only an owner's remote write is ever reconciled
            return await hook(ctx, args, await store_for(ctx))
        return call

    def kinds_for(owner_id: str) -> Mapping[str, str]:
        return {tool.name: kind.name} if on_server(owner_id) else {}

    def action(spec: ActionSpec) -> ActionSpec:
        preview, hook = previews.get(spec.name), hooks.get(spec.name)
        return replace(spec, executor=on_store(runs[spec.name]),
                       preview=on_store(preview) if preview is not None else spec.preview,
                       remote_for=on_server, kinds_for=kinds_for,
                       reconcile=reconcile(hook) if hook is not None else spec.reconcile)

    return replace(tool, actions=tuple(action(a) for a in tool.actions), id_kinds=(*tool.id_kinds, kind))
