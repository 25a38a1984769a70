"""Id validation — the injection boundary.

Every id an action carries must be one the tools returned in this thread for its kind (a list
row, an item read, an item a write created); positions ("#2") are resolved from the latest
list of the kind here. Fail closed: a refusal
binds nothing and turns into a clarifying question.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from tollgate.graph.ledger.audit import AuditRecord, append_audit
from tollgate.graph.services import ServicesProvider
from tollgate.graph.state import Context, Plan, RecentList, TurnState
from tollgate.nodes.shown import user_request
from tollgate.nodes._common import NotRun, finalized, not_run, seal, sink_for, thread_id_of, with_calls
from tollgate.policies.approval import args_hash
from tollgate.policies.ids import IdBinding, Location, bind_ids, id_refs, with_ids
from tollgate.tools.registry import ActionSpec, Registry

__all__ = ["bind_plan_ids", "make_id_validation", "refusal_message"]

_TOKEN = re.compile(r"[^\s,;()\[\]{}<>\"'“”]+")
"""A run of characters that could be an id the owner typed (a sentence's last stop is taken off)."""

_MESSAGES = {
    "no_list": "Which {kind} do you mean? Ask me to list your {kind} items first, then pick one by number.",
    "position_out_of_range": "That number isn't in your latest {kind} list. Which one do you mean?",
    "not_returned": "I can only act on {kind} items I've shown you in this conversation. Which one do you mean?",
    "bad_id": "That doesn't look like a {kind} id. Which one do you mean?",
    "duplicate": "The same {kind} item was named twice. Which ones do you mean?",
    "blank": "Which {kind} item do you mean?",
    "empty": "Which {kind} items do you mean?",
    "ambiguous_list": "Two lists of {kind} items were shown at once, so a number could mean either. Which {kind} do you mean?",
}


def refusal_message(refusal: str, kind: str) -> str:
    """The clarifying question for an id refusal of ``kind``."""
    return _MESSAGES.get(refusal, _MESSAGES["not_returned"]).format(kind=kind)


def bind_plan_ids(
    registry: Registry, spec: ActionSpec, args: dict[str, Any], thread: Mapping[str, Any], owner_id: str
) -> tuple[dict[str, Any], IdBinding | None, str]:
    """Bind every id field of ``args``; return new args, the failing binding (or None) and the kind's noun.

    ``thread`` is the thread's state (its ``recent`` lists and ``known`` ids). Every path of
    every id field is bound against the ids the thread was given of the kind ``owner_id``'s ids
    are (:meth:`~tools.registry.ActionSpec.id_fields_of`), all or nothing.
    """
    recent: dict[str, RecentList] = thread.get("recent") or {}
    known: dict[str, list[str]] = thread.get("known") or {}
    bound: list[tuple[Location, str]] = []
    typed_words: list[str] | None = None  # the request's words, read once and only for a kind that binds them
    for path, kind_name in spec.id_fields_of(owner_id).items():
        found = id_refs(args, path)
        if not found:
            continue
        kind = registry.id_kind(kind_name)
        listed = recent.get(kind_name) or {}
        latest = [str(row["id"]) for row in listed.get("rows", [])]
        # A kind that says so also binds the ids the owner typed in this request, when its check confirms them.
        typed: set[str] = set()
        if kind.owner_typed:
            if typed_words is None:
                typed_words = [w.rstrip(".!?:") for w in _TOKEN.findall(user_request(thread))]
            typed = {w for w in typed_words if kind.accepts(w)}
        binding = bind_ids([ref for _, ref in found], latest, {*known.get(kind_name, ()), *latest, *typed},
                           accepts=kind.accepts, positions=kind.positions, ambiguous=bool(listed.get("ambiguous")))
        if not binding.ok:
            return args, binding, kind.label
        bound += [(location, int(value) if isinstance(ref, int) and not isinstance(ref, bool) else value)
                  for (location, ref), value in zip(found, binding.ids, strict=True)]
    return (with_ids(args, bound) if bound else args), None, ""


def make_id_validation(provider: ServicesProvider) -> Any:
    """Build the id validation node: binds the ids of each call of the step that carries any.

    A call whose ids do not bind runs nothing: it gets an error tool message with the question
    to ask and a record in the turn's calls; the step's other calls go on.
    """

    async def id_validation(state: TurnState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        svc = await provider()
        plans = state.get("plans") or []
        if not any("args_hash" not in plan for plan in plans):
            return {}
        sink = sink_for(state, runtime)
        kept: list[Plan] = []
        done: list[NotRun] = []
        for plan in plans:
            if "args_hash" in plan:
                kept.append(plan)
                continue
            spec = svc.registry.action(plan["tool"], plan["action"])
            failure: IdBinding | None = None
            kind = ""
            if spec is not None:
                args, failure, kind = bind_plan_ids(svc.registry, spec, plan["args"], state,
                                                       runtime.context.owner_id)
            if spec is None or (failure is not None and failure.refusal is not None):
                # (an unknown action was refused by the gate already; stay closed anyway)
                refusal = failure.refusal if failure is not None and failure.refusal else "not_returned"
                sink.emit("error", code="off_list_id", reason=refusal, kind=kind)
                done.append(not_run(plan, "clarify", writes=spec is not None and spec.writes, code="off_list_id",
                                    message=refusal_message(refusal, kind or "item")))
                await append_audit(svc.db.pool, AuditRecord(
                    owner_id=runtime.context.owner_id, stage="ids", decision="clarify", reason=refusal,
                    code="off_list_id", tool=plan["tool"], action=plan["action"], args_hash=args_hash(plan["args"]),
                    thread_id=thread_id_of(config), turn_id=state.get("turn_id", ""),
                ), now=svc.clock())
                continue
            proposed_at = int(svc.clock().timestamp()) if plan.get("verdict") == "propose" else None
            final = finalized(plan, args, args_hash(args), proposed_at=proposed_at)
            kept.append(seal(svc, final, runtime.context, thread_id_of(config), state.get("turn_id", ""), purpose="gate"))
        return {"plans": kept, "seq": sink.seq} | with_calls(state, done)

    return id_validation
