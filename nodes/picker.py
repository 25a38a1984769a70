"""The native picker: a chat model chooses the step's calls from closed, registry-built schemas.

The model sees the current request, the turn's earlier calls and their results, a bounded
window of earlier turns' exchanges and the rows of the latest lists, all fenced as DATA. It may
answer with several calls; each is strictly decoded on its own: an unknown function, an unknown
key or a wrong type becomes an error tool message listing the violations (the model sees it at
the next step), and never blocks the answer's other calls. When no call of an answer decodes,
the model is asked once to correct itself; if it still cannot, the turn asks the user to
clarify. The model never sets identity or tier: no schema has such a field, and the gate decides.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage, AIMessageChunk, AnyMessage, BaseMessage, HumanMessage, ToolMessage, message_chunk_to_message,
)
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.runtime import Runtime

from tollgate.graph.events import EventSink
from tollgate.graph.ledger.audit import AuditRecord, append_audit
from tollgate.graph.models.resilient import ModelsUnavailable
from tollgate.graph.models.tool_calls import parsed_calls
from tollgate.graph.observe import tracing
from tollgate.graph.services import Services, ServicesProvider
from tollgate.graph.state import CallRecord, Context, Gate, Plan, RecentList, TurnState
from tollgate.graph.store import leases
from tollgate.nodes._common import thread_id_of
from tollgate.nodes._picking import (
    decode_call,
    is_capability_question,
    message_text,
    normalized_calls,
    storable_answer,
    usage_record,
)
from tollgate.nodes.menu import Menu, MenuBuilder
from tollgate.nodes.picker_prompt import ContextRow, EarlierTurn, PickerContext, build_messages
from tollgate.nodes.window import WINDOW_SQL, earlier_turns, window_rows
from tollgate.policies.approval import raw_args_hash
from tollgate.policies.fencing import new_nonce
from tollgate.policies.hitl import MAX_ACTIONS
from tollgate.policies.storable import MAX_DEPTH, depth_of

__all__ = ["make_picker"]

# Claim the thread, supersede whatever waits for approval on it, read the window. Its row:
# ``owner_id`` (``None``: another owner's thread, or a deleted one), ``superseded``, ``prior``.
_SETUP_SQL = """
WITH ins AS (
    INSERT INTO threads (thread_id, owner_id) VALUES (%(thread)s, %(owner)s)
    ON CONFLICT (thread_id) DO UPDATE SET updated_at = now()
    WHERE threads.owner_id = EXCLUDED.owner_id AND threads.deleted_at IS NULL  -- a deleted thread runs nothing
    RETURNING owner_id
), superseded AS (
    -- A new message supersedes whatever was waiting for approval on this thread.
    UPDATE approvals SET status = 'superseded', decided_at = now(), finished_at = now()
    WHERE thread_id = %(thread)s AND owner_id = %(owner)s AND status = 'pending'
      AND EXISTS (SELECT 1 FROM ins)
    RETURNING 1
)
SELECT
    (SELECT owner_id FROM ins) AS owner_id,
    (SELECT count(*) FROM superseded) AS superseded,
    (""" + WINDOW_SQL + """) AS prior
"""


def _recent_as_declared(state: TurnState, own: Mapping[str, str]) -> dict[str, RecentList]:
    """The thread's recent lists named by the kinds the tools declare: an owner's own kind
    (``imap_mail``) shows as the tool's (``mail``), and a list of the declared kind the owner's
    calls can no longer bind (listed before they moved to their own server) is not shown."""
    recent = dict(state.get("recent") or {})
    for declared, kind in own.items():
        recent.pop(declared, None)
        if kind in recent:
            recent[declared] = recent.pop(kind)
    return recent


def _picker_context(state: TurnState, ctx: Context, svc: Services, prior: list[EarlierTurn]) -> PickerContext:
    now = svc.clock().astimezone(ZoneInfo(ctx.timezone))
    lists = _recent_as_declared(state, svc.registry.own_kinds(ctx.owner_id))
    recent: dict[str, list[ContextRow]] = {
        kind: [ContextRow(position=i, id=row["id"], label=row["label"]) for i, row in enumerate(lst["rows"], 1)]
        for kind, lst in lists.items()
    }
    return PickerContext(
        now=now.isoformat(timespec="seconds"),
        timezone=ctx.timezone,
        recent=recent,
        latest_kind=max(lists, key=lambda kind: lists[kind].get("listed_at", "")) if lists else None,
        prior_user_turns=[t["user_said"] for t in prior if t["user_said"]],
        earlier_turns=prior,
        capabilities=svc.registry.capability_summary(),
        locale=ctx.locale,
    )


_MODEL_DOWN = ("The model isn't answering right now, so I didn't do anything. "
               "Please try again in a minute; nothing was changed.")


def _fallback_event(sink: EventSink, role: str, answer: AIMessage) -> None:
    failures = answer.response_metadata.get("tollgate_fallbacks") or []
    if failures:
        sink.emit("model_fallback", role=role, failed=failures, answered_by=answer.response_metadata.get("tollgate_provider"))


_WINDOWS_KEPT = 256
"""Turns whose window of earlier turns one process keeps for their later steps."""

_RESETTABLE = ("plans", "gate", "pending", "approval_request", "calls", "outbound", "steps", "lists_run", "usage",
               "superseded", "fell_back")
"""Turn-scoped fields a new turn resets; their readers treat a missing value as the reset one. Not
``sent_out``: DLP judges an outbound read joined with what the thread sent before, across turns (a
secret sent in halves, one per turn, is still one secret)."""


async def _audit(svc: Services, ctx: Context, config: RunnableConfig, turn_id: str, decision: str, reason: str,
                 code: str, *, function: str = "", raw: object = None) -> None:
    """One audit record of a picker refusal; a refused call names its action when it is registered."""
    found = svc.registry.lookup(function) if function else None
    await append_audit(svc.db.pool, AuditRecord(
        owner_id=ctx.owner_id, stage="picker", decision=decision, reason=reason, code=code,
        tool=found[0].name if found else "", action=found[1].name if found else "",
        args_hash=raw_args_hash(raw), thread_id=thread_id_of(config), turn_id=turn_id,
        mode=svc.settings.governance_mode, detail={"unknown_function": True} if function and not found else {},
    ), now=svc.clock())


async def _answer(model: Runnable[Any, Any], messages: list[AnyMessage], config: RunnableConfig, sink: EventSink) -> Any:
    """The model's answer, read as it streams: its text goes out as ``token_delta`` events as it
    arrives (provisional, as the naturalizer's: the ``message_complete`` text, after the honesty
    gate, is the reply), its tool calls are taken whole. A model without native streaming gives
    its whole answer at once, with no deltas."""
    with tracing.model_call("picker") as call:
        answer = await _streamed(model, messages, config, sink)
        tracing.answered(call, answer)
        return answer


async def _streamed(model: Runnable[Any, Any], messages: list[AnyMessage], config: RunnableConfig,
                    sink: EventSink) -> Any:
    chunks: list[AIMessageChunk] = []
    async for chunk in model.astream(messages, config):
        if not isinstance(chunk, AIMessageChunk):
            return chunk
        chunks.append(chunk)
        if chunk.text:
            sink.emit("token_delta", text=chunk.text)
    if not chunks:
        return AIMessage(content="")
    # Merged once at the end: adding each chunk to the sum so far builds a message per chunk.
    return _strictly_parsed(chunks[0] + chunks[1:] if len(chunks) > 1 else chunks[0])


def _strictly_parsed(full: AIMessageChunk) -> AIMessage:
    """The streamed answer as one message, each call's arguments parsed as strict JSON.

    Not LangChain's own parse of the chunks: it repairs partial JSON (a stream cut after
    ``{"to": ["sam@`` would read as a whole call), where a call whose arguments are not a whole
    JSON object must be refused as invalid, as it is when the answer comes unstreamed.
    """
    calls, invalid = parsed_calls((piece.get("name") or "", piece.get("args") or "", piece.get("id"))
                                  for piece in full.tool_call_chunks)
    message = message_chunk_to_message(full)
    return message.model_copy(update={"tool_calls": calls, "invalid_tool_calls": invalid})


def make_picker(provider: ServicesProvider) -> Any:
    """Build the picker node."""
    menus: dict[int, MenuBuilder] = {}
    windows: OrderedDict[str, list[EarlierTurn]] = OrderedDict()

    def remember(turn_id: str, rows: list[dict[str, Any]], svc: Services) -> list[EarlierTurn]:
        """The window built from the transcript's ``rows``, kept for the turn's later steps."""
        window = windows[turn_id] = earlier_turns(rows, svc.settings.history_tokens)
        while len(windows) > _WINDOWS_KEPT:
            windows.popitem(last=False)
        return window
    bound: dict[tuple[int, frozenset[str]], tuple[BaseChatModel, Runnable[Any, BaseMessage]]] = {}

    # Both caches key on id() and keep the object: an id is reused once its object is collected,
    # so a hit counts only when it is still the same registry or model.
    def _menu(svc: Services, request: str, calls: list[CallRecord]) -> Menu:
        builder = menus.get(id(svc.registry))
        if builder is None or builder.registry is not svc.registry or builder.version != svc.registry.version:
            builder = menus[id(svc.registry)] = MenuBuilder(svc.registry, svc.settings.menu_cap)
        # The whole task decides the menu: the request, and the tools the turn already used (a
        # later step's tool is most often a sibling of an earlier one: list mail, then reply).
        return builder.build(request, used=tuple(dict.fromkeys(c["tool"] for c in calls if c["action"])))

    def _model(svc: Services, menu: Menu) -> Runnable[Any, BaseMessage]:
        key = (id(svc.picker_model), svc.registry.version, menu.names)
        hit = bound.get(key)
        if hit is None or hit[0] is not svc.picker_model:
            if len(bound) > 64:
                bound.clear()
            model: BaseChatModel = svc.picker_model
            hit = bound[key] = (model, model.bind_tools(menu.schemas))
        return hit[1]

    async def picker(state: TurnState, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        svc = await provider()
        ctx = runtime.context
        messages: list[AnyMessage] = list(state.get("messages") or [])
        new_turn = bool(messages) and isinstance(messages[-1], HumanMessage)
        update: dict[str, Any] = {}
        if new_turn:
            turn_id = "turn_" + uuid.uuid4().hex[:16]
            pending = state.get("pending")
            update = {
                "turn_id": turn_id,
                "seq": 0,
                "plans": [],
                "gate": None,
                "pending": None,
                "approval_request": None,
                "calls": [],
                "outbound": [],
                "outcome": "reply",
                "reply": "",
                "steps": 0,
                "lists_run": [],
                "usage": [],
                "superseded": pending["preview"] if pending and "decision" not in pending else None,
                "fell_back": False,
            }
            # A channel already at its reset value is not written again: each write is a new
            # version, hence one more blob in the turn's checkpoint (a new thread writes none).
            for key in _RESETTABLE:
                if state.get(key) == update[key] or (key not in state and not update[key]):
                    del update[key]
            sink = EventSink(runtime.stream_writer, turn_id, 0)
        else:
            sink = EventSink(runtime.stream_writer, state.get("turn_id", ""), state.get("seq", 0))
        human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        request = human.text if human is not None else ""

        prior: list[EarlierTurn] = []
        if not new_turn and svc.settings.history_turns:
            # A later step of the turn reuses the window its first step built (the transcript does
            # not change within a turn); a step resumed in another process reads it again.
            cached = windows.get(state.get("turn_id", ""))
            if cached is None:
                rows = await window_rows(svc, thread_id_of(config))
                cached = remember(state.get("turn_id", ""), rows, svc)
            prior = cached
        if new_turn:
            thread_id = thread_id_of(config)
            setup = {"thread": thread_id, "owner": ctx.owner_id, "limit": svc.settings.history_turns}
            async with leases.fenced(svc.db.pool, owner=ctx.owner_id) as conn:
                cur = await conn.execute(_SETUP_SQL, setup)
            row = await cur.fetchone()  # read once committed: the check, the setup and the commit are one round trip
            if row is None or row["owner_id"] != ctx.owner_id:
                # The thread exists and belongs to someone else: act on nothing.
                await _audit(svc, ctx, config, turn_id, "refuse", "foreign_thread", "permission_denied")
                sink.emit("planner_decision", decision="refuse", code="permission_denied")
                return update | {
                    "seq": sink.seq,
                    "gate": Gate(
                        verdict="refuse",
                        reason="foreign_thread",
                        code="permission_denied",
                        message="This conversation is not available to you.",
                    ),
                    "outcome": "refused",
                }
            if update.get("superseded") and not row["superseded"]:
                # The checkpoint still held a request whose approvals were no longer pending (it ran,
                # failed or expired before the checkpoint caught up): nothing was replaced, so say nothing.
                update["superseded"] = None
            prior = remember(turn_id, list(row["prior"] or []), svc)
            if is_capability_question(request):
                sink.emit("planner_decision", decision="reply", reason="capabilities")
                gate = Gate(verdict="reply", reason="capabilities", message=svc.registry.capability_summary())
                return update | {"seq": sink.seq, "gate": gate, "plans": []}

        calls: list[CallRecord] = [] if new_turn else list(state.get("calls") or [])
        menu = _menu(svc, request, calls)
        step_messages = messages[messages.index(human) + 1 :] if human is not None else []
        prompt = build_messages(request, _picker_context(state, ctx, svc, prior), new_nonce()) + step_messages
        prompt_chars = sum(len(str(m.content)) for m in prompt)
        model = _model(svc, menu)
        usage: list[dict[str, Any]] = list(update.get("usage", state.get("usage") or []))
        new_messages: list[AnyMessage] = []
        corrected = False
        plans: list[Plan] = []
        refused: list[CallRecord] = []
        invalid: list[tuple[str, object]] = []
        text_answer: AIMessage | None = None
        cap = min(svc.settings.max_calls_per_step, MAX_ACTIONS)
        for attempt in range(2):
            try:
                answer = await _answer(model, prompt + new_messages, config, sink)
            except ModelsUnavailable as exc:
                # No fallback (production's default): say so, run nothing, and tell the surfaces why.
                sink.emit("model_fallback", role="picker", failed=exc.failures, answered_by=None)
                sink.emit("planner_decision", decision="reply", reason="model_unavailable")
                gate = Gate(verdict="reply", reason="model_unavailable", message=_MODEL_DOWN)
                return update | {"seq": sink.seq, "gate": gate, "plans": [], "usage": usage}
            if not isinstance(answer, AIMessage):
                raise TypeError(f"picker model returned {type(answer).__name__}, not AIMessage")
            _fallback_event(sink, "picker", answer)
            if answer.response_metadata.get("tollgate_fallbacks") and answer.response_metadata.get("tollgate_provider") == "offline":
                update = update | {"fell_back": True}
            record = usage_record("picker", answer, prompt_chars)
            if record is not None:
                usage.append(record)
            if not answer.tool_calls and not answer.invalid_tool_calls:
                new_messages.append(answer)
                text_answer = answer
                break
            answer, bad = normalized_calls(answer)
            stored, too_deep = storable_answer(answer)
            new_messages.append(stored)
            refused = []
            invalid = []
            for index, call in enumerate(answer.tool_calls):
                call_id = str(call["id"])
                violations = bad.get(call_id, [])
                plan: Plan | None = None
                if index >= cap:
                    violations = [f"more than {cap} calls in one answer; call this one again in the next step"]
                elif too_deep and depth_of(call.get("args")) > MAX_DEPTH:
                    violations = [f"(arguments): nested deeper than {MAX_DEPTH} levels"]
                elif not violations:
                    plan, violations = decode_call(svc.registry, menu, call, request)
                if plan is not None:
                    plans.append(plan)
                    continue
                new_messages.append(ToolMessage(
                    content="Invalid call, nothing ran. Fix these and call again:\n- " + "\n- ".join(violations),
                    tool_call_id=call_id, status="error"))
                refused.append(CallRecord(call_id=call_id, tool=str(call.get("name") or "")[:64], action="",
                                          status="clarify", writes=False, code="invalid_args",
                                          message="I couldn't turn that into a valid request, so I did nothing."))
                invalid.append((str(call.get("name") or ""), call.get("args")))
            if plans:
                break
            corrected = attempt == 0
        # Each call of the final answer that did not decode is one refusal (the first answer's were
        # shown to the model to correct, and corrected or refused again here).
        for name, raw in invalid:
            await _audit(svc, ctx, config, update.get("turn_id") or state.get("turn_id", ""), "clarify",
                         "invalid_call", "invalid_args", function=name, raw=raw)
        tags = {"tags": list(menu.tags.applied), "ignored_tags": list(menu.tags.ignored)} if (
            menu.tags.applied or menu.tags.ignored) else {}
        lists_run = list(update.get("lists_run", []) if new_turn else state.get("lists_run") or [])
        fresh: list[Plan] = []
        for plan in plans:
            if plan["action"] == "list" and f"{plan['tool']}.list" in lists_run:
                # The same list runs once per turn until a write changes what it would show.
                new_messages.append(ToolMessage(content="Already listed in this turn: its rows are above.",
                                                tool_call_id=plan["call_id"]))
                refused.append(CallRecord(call_id=plan["call_id"], tool=plan["tool"], action=plan["action"],
                                          status="repeated", writes=False))
            else:
                fresh.append(plan)
        seq_update: dict[str, Any]
        if text_answer is None and not fresh and not plans:
            sink.emit("planner_decision", decision="clarify", code="invalid_args", corrected=corrected, **tags)
            gate = Gate(
                verdict="clarify",
                reason="invalid_call",
                code="invalid_args",
                message="I couldn't turn that into a valid request, so I did nothing. Could you rephrase it?",
            )
            seq_update = {"gate": gate, "plans": [], "outcome": "clarify"}
        elif not fresh:
            text = message_text(text_answer) if text_answer is not None else ""
            reason = {} if text_answer is not None else {"reason": "list_already_run"}
            sink.emit("planner_decision", decision="reply", **reason, **tags)
            seq_update = {"gate": Gate(verdict="reply", reason=reason.get("reason", "no_tool_call"), message=text),
                          "plans": []}
        else:
            for plan in fresh:
                sink.emit("planner_decision", decision="tool", tool=plan["tool"], action=plan["action"],
                          corrected=corrected, **tags)
            seq_update = {"plans": fresh, "gate": None, "steps": (0 if new_turn else state.get("steps", 0)) + 1}
        calls_update = {"calls": calls + refused} if refused else {}
        return update | seq_update | calls_update | {"messages": new_messages, "seq": sink.seq, "usage": usage}

    return picker
