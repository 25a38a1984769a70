"""The flow check of the tier gate: an outbound read that carries what the model was shown asks first.

:mod:`policies.flow` decides; this module gathers what it decides over, from the server's own
records only: the results of the turn's calls (the state), the window of earlier turns (the
transcript), the user's own words, and the outbound values already sent this turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from langchain_core.messages import HumanMessage

from graph.services import Services
from graph.state import Plan, TurnState
from nodes.window import window_rows
from policies.dlp import strings_in
from policies.flow import Carried, Shown, carried, origin_of, shown_from

__all__ = ["carried_by", "conversation_warning", "describe", "flow_warning", "is_outbound", "outbound_values", "provenance",
           "provenance_warning", "shown_to_model"]


def _sends_everything(svc: Services, plan: Plan) -> bool:
    spec = svc.registry.action(plan["tool"], plan["action"])
    tool = svc.registry.tool(plan["tool"])
    return spec is not None and (spec.remote or tool is None or not tool.database)


def is_outbound(svc: Services, plan: Plan) -> bool:
    """Whether ``plan`` is a read whose arguments leave Tollgate (a tool with no database of its
    own, an action declared remote, or one that marks ``outbound_fields``); writes ask for approval anyway."""
    spec = svc.registry.action(plan["tool"], plan["action"])
    return spec is not None and not spec.writes and (bool(spec.outbound_fields) or _sends_everything(svc, plan))


def outbound_values(svc: Services, plan: Plan) -> list[str]:
    """The strings an outbound call sends: every argument's, or those of its ``outbound_fields``."""
    spec = svc.registry.action(plan["tool"], plan["action"])
    if spec is not None and spec.outbound_fields and not _sends_everything(svc, plan):
        return strings_in([plan["args"].get(name) for name in spec.outbound_fields])
    return strings_in(plan["args"])


async def shown_to_model(svc: Services, state: TurnState, thread_id: str) -> Shown:
    """What the model was shown in this turn and in the window of earlier turns, newest first."""
    results: list[tuple[str, str]] = []
    third: set[str] = set()
    for call in reversed(state.get("calls") or []):
        result = call.get("result")
        if result is not None:
            source = describe(f"{call['tool']}.{call['action']}", result.get("item"))
            results += [(source, text) for text in strings_in(result)]
            if _others(svc, call["tool"], call["action"], result.get("item")):
                third.add(source)
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
                name = str(item.get("call", "an earlier call"))
                source = describe(name, item.get("item"))
                results += [(source, text) for text in strings_in(item)]
                tool, _, action = name.partition(".")
                if _others(svc, tool, action, item.get("item")):
                    third.add(source)
        if parts.get("assistant"):
            results.append(("an earlier reply", str(parts["assistant"])))
    return shown_from(results, user, third)


def _others(svc: Services, tool: str, action: str, item: Any) -> bool:
    """Whether a result is someone else's content: an action that declares it (pages, search
    results), an item with a field it declares set (an invitation's description), or an item
    naming a sender other than the owner (others' mail)."""
    spec = svc.registry.action(tool, action)
    if spec is not None and spec.third_party:
        return True
    if not isinstance(item, dict):
        return False
    if spec is not None and any(item.get(name) for name in spec.third_party_fields):
        return True
    return str(item.get("from") or "you") != "you"


def describe(call: str, item: Any) -> str:
    """Where a result's text came from, as an approval card says it: the call, and the item's
    subject or title and sender when it has them (``mail.read “Re: invoice” from x@y.example``)."""
    if not isinstance(item, dict):
        return call
    name = item.get("subject") or item.get("title") or ""
    sender = item.get("from") or ""
    return (call + (f" “{str(name)[:60]}”" if name else "") + (f" from {str(sender)[:80]}" if sender else ""))[:160]


def provenance(args: dict[str, Any], shown: Shown, *, skip: Iterable[str] = ()) -> dict[str, str]:
    """Where each argument's value came from, by field (list elements joined), for the approval card.

    ``skip`` names fields left out: id fields, whose values are bound to what the server listed
    by id validation (the injection boundary) and shown by their labels in the preview.
    """
    skipped = set(skip)
    out: dict[str, str] = {}
    for name, value in args.items():
        if name in skipped:
            continue
        texts = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)] if isinstance(
            value, list) else []
        origins = [origin_of(text, shown) for text in texts]
        if not origins:
            continue
        said = [(f"from {source}" + (" (someone else's content)" if source in shown.third_party else ""))
                if kind == "shown" else f"a server fact from {source}" if kind == "fact"
                else "typed by you" if kind == "user" else "chosen by the model"
                for kind, source in origins]
        out[name] = "; ".join(dict.fromkeys(said))
    return out


def provenance_warning(where: dict[str, str]) -> str:
    """The card's warning when a value comes from someone else's content, not from the person."""
    copied = [f"{field} ({said})" for field, said in where.items() if "(someone else's content)" in said]
    if not copied:
        return ""
    return ("⚠ From someone else's content, not from you: " + "; ".join(copied).replace(" (someone else's content)", "")
            + ". Check these before approving: a mail or a page can ask for anything.")


def conversation_warning(shown: Shown, where: dict[str, str]) -> str:
    """The card's warning for a write in a conversation that showed the model someone else's
    content: an instruction hidden there may be why the model asks (unless a value's own warning
    already says where it came from)."""
    if not shown.third_party or any("(someone else's content)" in said for said in where.values()):
        return ""
    sources = sorted(shown.third_party)
    named = ", ".join(sources[:2]) + (f" and {len(sources) - 2} more" if len(sources) > 2 else "")
    return (f"⚠ This conversation showed me someone else's content ({named}): make sure this is what you "
            "asked for, not what that content asked for.")


def carried_by(svc: Services, plan: Plan, shown: Shown, state: TurnState) -> Carried:
    """What ``plan`` would carry out, judged with the outbound values already sent this turn."""
    return carried(outbound_values(svc, plan), shown, state.get("outbound") or [])


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
