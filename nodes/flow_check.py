"""The flow check of the tier gate: an outbound read that carries what the model was shown asks first.

:mod:`policies.flow` decides; this module gathers what it decides over, from the server's own
records only: the results of the turn's calls (the state), the window of earlier turns (the
transcript), the user's own words, and the outbound values already sent this turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from langchain_core.messages import HumanMessage

from graph.services import Services
from graph.state import Plan, TurnState
from nodes.window import window_rows
from policies.flow import Carried, Shown, carried, shown_from

__all__ = ["carried_by", "flow_warning", "is_outbound", "outbound_values", "shown_to_model"]


def is_outbound(svc: Services, plan: Plan) -> bool:
    """Whether ``plan`` is a read whose arguments leave Tollgate (a tool with no database of its
    own, or an action declared remote); writes ask for approval anyway."""
    spec = svc.registry.action(plan["tool"], plan["action"])
    tool = svc.registry.tool(plan["tool"])
    return spec is not None and not spec.writes and (spec.remote or tool is None or not tool.database)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def outbound_values(plan: Plan) -> list[str]:
    """The strings an outbound call sends."""
    return list(_strings(plan["args"]))


async def shown_to_model(svc: Services, state: TurnState, thread_id: str) -> Shown:
    """What the model was shown in this turn and in the window of earlier turns, newest first."""
    results: list[tuple[str, str]] = []
    for call in reversed(state.get("calls") or []):
        result = call.get("result")
        if result is not None:
            results += [(f"{call['tool']}.{call['action']}", text) for text in _strings(result)]
    human = next((m for m in reversed(state.get("messages") or []) if isinstance(m, HumanMessage)), None)
    user = [human.text] if human is not None else []
    for row in reversed(await window_rows(svc, thread_id)):
        parts = row.get("parts") or {}
        user.append(str(parts.get("user", "")))
        try:
            exchange = json.loads(parts.get("exchange") or "[]")
        except ValueError:
            exchange = []
        for item in exchange if isinstance(exchange, list) else []:
            if isinstance(item, dict):
                results += [(str(item.get("call", "an earlier call")), text) for text in _strings(item)]
        if parts.get("assistant"):
            results.append(("an earlier reply", str(parts["assistant"])))
    return shown_from(results, user)


def carried_by(plan: Plan, shown: Shown, state: TurnState) -> Carried:
    """What ``plan`` would carry out, judged with the outbound values already sent this turn."""
    return carried(outbound_values(plan), shown, state.get("outbound") or [])


def flow_warning(plan: Plan) -> str:
    """The approval card's warning for an outbound call the flow check sent to approval."""
    flow = plan.get("flow") or {}
    what = []
    if flow.get("sources"):
        what.append("text copied from what " + ", ".join(flow["sources"]) + " returned")
    if flow.get("contacts"):
        what.append("an e-mail address or phone number you did not type")
    if not what:
        return ""
    return (f"⚠ Outbound data: this sends {' and '.join(what)} to {plan['tool']}, outside Tollgate. "
            "Approve only if you mean to share it.")
