"""What the thread read: every tool result of the turn and of the window of earlier turns, with
its source and trust class, and the person's own words, indexed for :mod:`policies.provenance`.

Gathered from the server's own records only: the turn's call records (the state), the transcript
of earlier turns, and the registry's declarations of whose content each action returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from langchain_core.messages import HumanMessage

from tollgate.graph.services import Services
from tollgate.graph.state import TurnState
from tollgate.nodes.window import window_rows
from tollgate.policies.provenance import Shown, Source, Trust, shown_from

__all__ = ["describe", "result_texts", "shown_to_model", "trust_of", "user_request"]

_SKIP_KEYS = frozenset({"tool", "action", "kind", "list_kind", "item_kind", "call", "status", "changed", "id"})
"""Keys of a result whose values are the server's own vocabulary, not text the result carries."""


def _texts(value: Any, key: str = "") -> Iterator[str]:
    """The texts of a result: its strings, and its integers written out (an account number)."""
    if key in _SKIP_KEYS:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, int) and not isinstance(value, bool):
        yield str(value)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _texts(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v, key)


def trust_of(svc: Services, tool: str, action: str, item: Any) -> Trust:
    """Whose content a result is: someone else's when the action declares it (pages, search
    results, MCP results by default) or when its item names a sender other than the owner (others'
    mail); the owner's otherwise. (Fields an action declares third-party, an invitation's
    description, are someone else's whatever this says: :func:`result_texts`.)"""
    spec = svc.registry.action(tool, action)
    if spec is None or spec.third_party:
        return "third_party"  # an action no longer registered: its content is nobody's we vouch for
    if isinstance(item, Mapping) and str(item.get("from") or "you") != "you":
        return "third_party"
    return "owner"


def result_texts(svc: Services, call: str, result: Mapping[str, Any]) -> list[tuple[Source, str]]:
    """The texts of one result, each with its source: the item's declared third-party fields (an
    invitation's description) as someone else's content, the rest by :func:`trust_of`."""
    tool, _, action = call.partition(".")
    item = result.get("item")
    name = describe(svc, call, item)
    spec = svc.registry.action(tool, action)
    nouns = frozenset(spec.source_nouns) if spec is not None else frozenset()
    source = Source(call, name, trust_of(svc, tool, action, item), nouns)
    foreign = set(spec.third_party_fields) if spec is not None and isinstance(item, Mapping) else set()
    out: list[tuple[Source, str]] = []
    if foreign and isinstance(item, Mapping):
        theirs = Source(call, name, "third_party", nouns)
        out += [(theirs, text) for key in sorted(foreign) for text in _texts(item.get(key))]
        result = {**result, "item": {k: v for k, v in item.items() if k not in foreign}}
    return out + [(source, text) for text in _texts(result)]


def describe(svc: Services, call: str, item: Any) -> str:
    """The item a result's text came from, as a person recognises it (at most 160 characters):
    ``mail “Re: invoice” from x@y.example``, ``page news.example/pay``, ``file bill.txt``,
    ``MCP server pantry, tool list``, ``event “Vendor sync”``; the call when the item says nothing."""
    tool, _, action = call.partition(".")
    spec = svc.registry.action(tool, action)
    if spec is not None and spec.source_label is not None:
        return f"{spec.source_label} ({call})"[:160]
    if not isinstance(item, Mapping):
        return call
    title = str(item.get("subject") or item.get("title") or "")[:60]
    sender = str(item.get("from") or "")[:80]
    url = str(item.get("url") or "")
    named = str(item.get("file_name") or item.get("filename") or "")
    if sender and sender != "you":
        said = f"mail “{title}” from {sender}" if title else f"mail from {sender}"
    elif url:
        parts = urlsplit(url)
        said = f"page {parts.hostname or ''}{parts.path if parts.path not in ('', '/') else ''}"[:100]
        said += f" “{title}”" if title else ""
    elif named:
        said = f"file {named[:80]}"
    elif title:
        said = f"{call.split('.', 1)[0]} item “{title}”"
    else:
        return call
    return f"{said} ({call})"[:160]


def user_request(state: TurnState) -> str:
    """The person's request that began this turn."""
    human = next((m for m in reversed(state.get("messages") or []) if isinstance(m, HumanMessage)), None)
    return human.text if human is not None else ""


async def shown_to_model(svc: Services, state: TurnState, thread_id: str) -> Shown:
    """What the thread read in this turn and in the window of earlier turns, newest first, and the
    person's words; an earlier turn whose record cannot be read makes the index incomplete."""
    texts: list[tuple[Source, str]] = []
    complete = True
    for call in reversed(state.get("calls") or []):
        result = call.get("result")
        if result is not None:
            texts += result_texts(svc, f"{call['tool']}.{call['action']}", result)
    user = [user_request(state)]
    for row in reversed(await window_rows(svc, thread_id)):
        parts = row.get("parts") or {}
        user.append(str(parts.get("user", "")))
        try:
            exchange = json.loads(parts.get("exchange") or "[]")
        except ValueError:
            exchange, complete = [], False
        if not isinstance(exchange, list):
            exchange, complete = [], False
        for record in exchange:
            if not isinstance(record, dict):
                complete = False
                continue
            if record.get("truncated"):
                complete = False  # the transcript kept only part of that turn's results
            texts += result_texts(svc, str(record.get("call", "an earlier call")), record)
        if parts.get("assistant"):
            texts.append((Source("an earlier reply", "an earlier reply of mine"), str(parts["assistant"])))
    return shown_from(texts, user, complete=complete)
