"""The native picker: a chat model chooses one call from closed, registry-built schemas.

The model sees the current request, a bounded window of earlier *user* turns and the rows
of the latest lists, all fenced as DATA. Its output is strictly decoded: an unknown function,
an unknown key or a wrong type becomes a violation list that is shown to the model once so it
can correct itself; if the second answer is still invalid the turn asks the user to clarify.
The model never sets identity or tier: no schema has such a field, and the gate decides.
"""

from __future__ import annotations

import uuid
from typing import Any
from zoneinfo import ZoneInfo

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.runtime import Runtime

from graph import leases
from graph.events import EventSink
from graph.services import Services, ServicesProvider
from graph.state import Context, Gate, Plan, TurnState
from nodes._common import thread_id_of
from nodes._picking import (
    decode_call,
    is_capability_question,
    message_text,
    single_call,
    storable_answer,
    usage_record,
)
from nodes.menu import Menu, MenuBuilder
from nodes.picker_prompt import ContextRow, PickerContext, build_messages
from policies.fencing import new_nonce
from policies.storable import MAX_DEPTH

__all__ = ["make_picker"]

# Claim the thread, supersede whatever waits for approval on it, read the user's prior requests
# (the picker's window, oldest first). Its row: ``owner_id`` (``None``: another owner's thread),
# ``superseded``, ``prior``.
_SETUP_SQL = """
WITH ins AS (
    INSERT INTO threads (thread_id, owner_id) VALUES (%(thread)s, %(owner)s)
    ON CONFLICT (thread_id) DO UPDATE SET updated_at = now()
    WHERE threads.owner_id = EXCLUDED.owner_id
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
    (SELECT coalesce(json_agg(content ORDER BY id), '[]'::json) FROM (
        SELECT id, content FROM transcript
        WHERE thread_id = %(thread)s AND role = 'user'
        ORDER BY id DESC LIMIT %(limit)s
    ) prior) AS prior
"""


def _latest_kind(state: TurnState) -> str | None:
    recent = state.get("recent") or {}
    if not recent:
        return None
    return max(recent, key=lambda kind: recent[kind].get("listed_at", ""))


def _picker_context(state: TurnState, ctx: Context, svc: Services, prior: list[str]) -> PickerContext:
    now = svc.clock().astimezone(ZoneInfo(ctx.timezone))
    recent: dict[str, list[ContextRow]] = {
        kind: [ContextRow(position=i, id=row["id"], label=row["label"]) for i, row in enumerate(lst["rows"], 1)]
        for kind, lst in (state.get("recent") or {}).items()
    }
    budget = svc.settings.history_chars
    window: list[str] = []
    for text in reversed(prior):
        if budget - len(text) < 0:
            break
        budget -= len(text)
        window.insert(0, text)
    return PickerContext(
        now=now.isoformat(timespec="seconds"),
        timezone=ctx.timezone,
        recent=recent,
        latest_kind=_latest_kind(state),
        prior_user_turns=window,
        capabilities=svc.registry.capability_summary(),
    )


def _fallback_event(sink: EventSink, role: str, answer: AIMessage) -> None:
    failures = answer.response_metadata.get("tollgate_fallbacks") or []
    if failures:
        sink.emit("model_fallback", role=role, failed=failures, answered_by=answer.response_metadata.get("tollgate_provider"))


_RESETTABLE = ("plan", "gate", "pending", "approval_request", "result", "steps", "lists_run", "usage", "superseded")
"""Turn-scoped fields a new turn resets; their readers treat a missing value as the reset one."""


def make_picker(provider: ServicesProvider) -> Any:
    """Build the picker node."""
    menus: dict[int, MenuBuilder] = {}
    bound: dict[tuple[int, frozenset[str]], Runnable[Any, BaseMessage]] = {}

    def _menu(svc: Services, request: str) -> Menu:
        key = id(svc.registry)
        if key not in menus:
            menus[key] = MenuBuilder(svc.registry, svc.settings.menu_cap)
        return menus[key].build(request)

    def _model(svc: Services, menu: Menu) -> Runnable[Any, BaseMessage]:
        key = (id(svc.picker_model), menu.names)
        if key not in bound:
            if len(bound) > 64:
                bound.clear()
            model: BaseChatModel = svc.picker_model
            bound[key] = model.bind_tools(menu.schemas)
        return bound[key]

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
                "plan": None,
                "gate": None,
                "pending": None,
                "approval_request": None,
                "result": None,
                "outcome": "reply",
                "reply": "",
                "steps": 0,
                "lists_run": [],
                "usage": [],
                "superseded": pending["preview"] if pending and "decision" not in pending else None,
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

        prior: list[str] = []
        if new_turn:
            thread_id = thread_id_of(config)
            setup = {"thread": thread_id, "owner": ctx.owner_id, "limit": svc.settings.history_turns}
            async with leases.fenced(svc.db.pool) as conn:
                cur = await conn.execute(_SETUP_SQL, setup)
            row = await cur.fetchone()  # read once committed: the check, the setup and the commit are one round trip
            if row is None or row["owner_id"] != ctx.owner_id:
                # The thread exists and belongs to someone else: act on nothing.
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
            prior = list(row["prior"] or [])
            if is_capability_question(request):
                sink.emit("planner_decision", decision="reply", reason="capabilities")
                gate = Gate(verdict="reply", reason="capabilities", message=svc.registry.capability_summary())
                return update | {"seq": sink.seq, "gate": gate, "plan": None}

        menu = _menu(svc, request)
        step_messages = messages[messages.index(human) + 1 :] if human is not None else []
        prompt = build_messages(request, _picker_context(state, ctx, svc, prior), new_nonce()) + step_messages
        prompt_chars = sum(len(str(m.content)) for m in prompt)
        model = _model(svc, menu)
        usage: list[dict[str, Any]] = list(update.get("usage", state.get("usage") or []))
        new_messages: list[AnyMessage] = []
        corrected = False
        plan: Plan | None = None
        violations: list[str] = []
        for attempt in range(2):
            answer = await model.ainvoke(prompt + new_messages, config)
            if not isinstance(answer, AIMessage):
                raise TypeError(f"picker model returned {type(answer).__name__}, not AIMessage")
            _fallback_event(sink, "picker", answer)
            record = usage_record("picker", answer, prompt_chars)
            if record is not None:
                usage.append(record)
            if not answer.tool_calls:
                if answer.invalid_tool_calls:
                    bad_id = str(answer.invalid_tool_calls[0].get("id") or "call_invalid")
                    answer = answer.model_copy(
                        update={"invalid_tool_calls": [], "tool_calls": [
                            {"name": str(answer.invalid_tool_calls[0].get("name") or "unknown"), "args": {}, "id": bad_id,
                             "type": "tool_call"}]}
                    )
                    violations = ["the arguments were not valid JSON"]
                    new_messages += [answer, ToolMessage(
                        content="Invalid call, nothing ran. Fix these and call again:\n- " + violations[0],
                        tool_call_id=bad_id, status="error")]
                    corrected = attempt == 0
                    continue
                new_messages.append(answer)
                plan, violations = None, []
                break
            answer = single_call(answer)
            stored, too_deep = storable_answer(answer)
            new_messages.append(stored)
            if too_deep:
                plan, violations = None, [f"(arguments): nested deeper than {MAX_DEPTH} levels"]
            else:
                plan, violations = decode_call(svc.registry, menu, answer, request)
            if plan is not None:
                break
            call_id = str(answer.tool_calls[0].get("id") or "call")
            new_messages.append(
                ToolMessage(
                    content="Invalid call, nothing ran. Fix these and call again:\n- " + "\n- ".join(violations),
                    tool_call_id=call_id,
                    status="error",
                )
            )
            corrected = attempt == 0
        tags = {"tags": list(menu.tags.applied), "ignored_tags": list(menu.tags.ignored)} if (
            menu.tags.applied or menu.tags.ignored) else {}
        seq_update: dict[str, Any]
        if plan is None and violations:
            sink.emit("planner_decision", decision="clarify", code="invalid_args", corrected=corrected, **tags)
            gate = Gate(
                verdict="clarify",
                reason="invalid_call",
                code="invalid_args",
                message="I couldn't turn that into a valid request, so I did nothing. Could you rephrase it?",
            )
            seq_update = {"gate": gate, "plan": None, "outcome": "clarify"}
        elif plan is None:
            text = message_text(new_messages[-1]) if new_messages and isinstance(new_messages[-1], AIMessage) else ""
            sink.emit("planner_decision", decision="reply", **tags)
            seq_update = {"gate": Gate(verdict="reply", reason="no_tool_call", message=text), "plan": None}
        elif plan["action"] == "list" and f"{plan['tool']}.list" in (update.get("lists_run", []) if new_turn else state.get("lists_run") or []):
            # The same list runs at most once per turn: answer from what it already returned.
            sink.emit("planner_decision", decision="reply", reason="list_already_run", **tags)
            seq_update = {"gate": Gate(verdict="reply", reason="list_already_run", message=""), "plan": None}
        else:
            sink.emit(
                "planner_decision", decision="tool", tool=plan["tool"], action=plan["action"], corrected=corrected, **tags
            )
            seq_update = {"plan": plan, "gate": None}
        return update | seq_update | {"messages": new_messages, "seq": sink.seq, "usage": usage}

    return picker
