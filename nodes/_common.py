"""Small helpers shared by the nodes (not public API)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from tollgate.graph.events import EventSink
from tollgate.graph.services import Services
from tollgate.graph.state import CallRecord, CallStatus, Context, Plan, TurnState, outcome_of
from tollgate.policies.approval import SealPurpose, seal_plan
from tollgate.policies.governance import GovernanceDecision

__all__ = ["NotRun", "finalized", "not_run", "refused_message", "runs_unasked", "seal", "sink_for", "thread_id_of",
           "with_calls"]


def thread_id_of(config: RunnableConfig) -> str:
    """The thread id of this run (LangGraph's ``configurable.thread_id``)."""
    configurable: dict[str, Any] = config.get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if not isinstance(thread_id, str) or not thread_id:
        raise ValueError("a Tollgate turn needs a string thread_id in configurable")
    return thread_id


def sink_for(state: TurnState, runtime: Runtime[Context]) -> EventSink:
    """An event sink continuing this turn's sequence."""
    return EventSink(runtime.stream_writer, state.get("turn_id", ""), state.get("seq", 0))


def finalized(plan: Plan, args: dict[str, Any], digest: str, *, proposed_at: int | None) -> Plan:
    """``plan`` with its final ``args`` and their hash ``digest``; a proposal also records when it
    was made (``proposed_at``: the approval's expiry counts from it, so a replay mints the same token)."""
    final: Plan = {k: v for k, v in plan.items() if k not in ("args_hash", "seal")}  # type: ignore[assignment]
    final["args"] = args
    final["args_hash"] = digest
    if proposed_at is not None:
        final["proposed_at"] = proposed_at
    return final


def seal(svc: Services, plan: Plan, ctx: Context, thread_id: str, turn_id: str, *, purpose: SealPurpose) -> Plan:
    """``plan`` with the seal execute checks: only a call the gate (or the server) decided may run,
    and only as decided (the seal covers the plan's ``verdict``)."""
    mark = seal_plan(svc.key(), purpose=purpose, thread_id=thread_id, owner_id=ctx.owner_id, turn_id=turn_id,
                     call_id=plan["call_id"], tool=plan["tool"], action=plan["action"], args_hash=plan["args_hash"],
                     verdict=plan.get("verdict", ""))
    return {**plan, "seal": mark}


def refused_message(plan: Plan, code: str, message: str) -> ToolMessage:
    """The error tool message that tells the model a call of its answer did not run, and why."""
    return ToolMessage(content=f"Not run ({code}): {message}", tool_call_id=plan["call_id"], status="error")


NotRun = tuple[CallRecord, ToolMessage]
"""A call of the step that did not run: its record for the turn, and the tool message for the model."""


def not_run(plan: Plan, status: CallStatus, *, writes: bool, code: str, message: str, told: str | None = None) -> NotRun:
    """``plan`` did not run: its record (``message`` is what the person is told) and the error tool
    message that tells the model (``told``, else the same message)."""
    record = CallRecord(call_id=plan["call_id"], tool=plan["tool"], action=plan["action"], status=status,
                        writes=writes, code=code, message=message)
    return record, refused_message(plan, code, told if told is not None else message)


def with_calls(state: TurnState, done: list[NotRun]) -> dict[str, Any]:
    """The state update that appends ``done`` to the turn's calls and messages, and the outcome they make."""
    if not done:
        return {}
    calls = [*(state.get("calls") or []), *(record for record, _ in done)]
    return {"calls": calls, "messages": [message for _, message in done], "outcome": outcome_of(calls)}


def runs_unasked(svc: Services, ctx: Context, tool: str, action: str, decision: GovernanceDecision) -> str | None:
    """The deployment's approval rule that lets this proposed call run without asking, if any.

    Only a call proposed for its tier qualifies: one DLP sent to approval always asks.
    """
    if decision.verdict != "propose" or decision.reason == "dlp_finding" or decision.args is None:
        return None
    return svc.approval_rules.runs_unasked(ctx.owner_id, tool, action, decision.args)
