"""Trigger rules for an owner whose mail or calendar is on their own server: refused, not left idle.

The trigger evaluator (:mod:`graph.background.triggers`) watches the mail and events in
Tollgate's own tables. A rule on mail or events that an owner keeps on their own IMAP or CalDAV
server would never fire, and nobody would be told; so :func:`triggers_for` refuses such a rule
when it is proposed (and again should it reach the executor), saying why, and makes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, Final

from tollgate.policies.errors import ErrorCode, TollgateError
from tollgate.tools.connectors.backends import backend_of, backends_chosen
from tollgate.tools.registry import ActionSpec, ExecContext, ToolSpec
from tollgate.tools.triggers import TRIGGERS, TriggerCreateArgs

__all__ = ["NotWatched", "triggers_for"]

_WATCHED: Final = {"mail": ("mail", "mail"), "event": ("calendar", "calendar events")}
"""A rule's kind -> the tool whose store it watches, and what the owner calls that."""


class NotWatched(TollgateError):
    """A trigger rule on mail or events the trigger evaluator cannot see (the owner's own server)."""

    code: ErrorCode = "unavailable"

    def __init__(self, what: str) -> None:
        super().__init__(f"trigger rules watch {what} kept in Tollgate itself, and yours are on your own server, "
                         "which they do not watch yet, so no rule was made")


def triggers_for(settings: Mapping[str, Any] | None) -> ToolSpec:
    """The triggers tool for ``settings``: the built-in one, refusing a rule whose mail or events
    its owner keeps on their own server."""
    values = settings or {}
    if all(backends_chosen(values, tool) == {"builtin"} for tool, _ in _WATCHED.values()):
        return TRIGGERS

    def watched(ctx: ExecContext, args: TriggerCreateArgs) -> None:
        tool, what = _WATCHED[args.match.kind]
        if backend_of(values, tool, ctx.owner_id) != "builtin":
            raise NotWatched(what)

    def checked(run: Callable[[ExecContext, Any], Awaitable[Any]]) -> Callable[[ExecContext, Any], Awaitable[Any]]:
        async def call(ctx: ExecContext, args: Any) -> Any:
            watched(ctx, args)
            return await run(ctx, args)
        return call

    def action(spec: ActionSpec) -> ActionSpec:
        if spec.name != "create" or spec.preview is None:
            return spec
        return replace(spec, executor=checked(spec.executor), preview=checked(spec.preview))

    return replace(TRIGGERS, actions=tuple(action(a) for a in TRIGGERS.actions))
