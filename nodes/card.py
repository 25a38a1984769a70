"""The approval card's account of a call: where each value came from, what the person asked for,
and the warnings a person decides by.

:mod:`policies.provenance` traces each value to what the thread read and :mod:`policies.intent`
reads the request; this module turns both into what every surface shows (the HITL payload for
Studio and other clients, the web page, the CLI and the approvals API all show these texts).

The card's warnings, each with a code clients can read (``warnings`` of an action request):

* ``not_requested`` ⚠: a write the request did not ask for, proposed after the thread read someone
  else's content: "suggested by content in mail from X, not by your request".
* ``third_party_value`` ⚠: a value copies someone else's content that the request did not name, or
  repeats six or more consecutive words of someone else's text (named or not).
* ``instructions`` ⚠: a value copies text that gives an assistant instructions (an injection's shape),
  or the tool's own description (an MCP server's) reads as instructions and was withheld from the model.
* ``unknown_source`` ⚠: where a value came from could not be checked.
* ``named_content`` ⓘ: a value copies someone else's content that the request named ("pay the bill
  in the invoice"): said, not warned.
* ``read_content`` ⓘ: the thread read someone else's content, and nothing on the card comes from it.

A careful reviewer rejects a card with any ⚠ warning of the first four codes (or ``outbound``) unless they know better;
the safety eval's careful approver does exactly that (``evals/safety``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tollgate.policies.intent import asked_for, intent_words, points_to
from tollgate.policies.provenance import Match, Shown, ValueOrigin, origin, verbatim
from tollgate.policies.hitl import CardWarning, ProvenanceMatch
from tollgate.tools.registry import ActionSpec

__all__ = ["Card", "UNKNOWN", "card_for", "unknown_card", "you_asked"]

UNKNOWN: Final = "unknown source (its origin could not be checked)"
"""The label of a value whose provenance check could not run."""


@dataclass(frozen=True, slots=True)
class Card:
    """What an approval card says of one call beside its preview."""

    labels: dict[str, str]
    """Field -> where its value came from, in words ("typed by you", "from mail “…” from x@y …")."""
    detail: dict[str, list[ProvenanceMatch]]
    """Field -> the tokens traced to what the thread read, with source, trust and a snippet."""
    warnings: list[CardWarning]
    """The card's warnings and notes, in the order shown."""


def you_asked(request: str) -> str:
    """The card's first line: the request, quoted (clipped at 200 characters)."""
    said = " ".join(request.split())
    return f"You asked: “{said[:200]}{'…' if len(said) > 200 else ''}”" if said else "You asked: (no request text)"


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [str(value)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    return []


def _quote(match: Match) -> str:
    return f"{match.source}: “{match.snippet}”"


def _label(found: ValueOrigin) -> str:
    if found.kind in ("third_party", "owner"):
        best = {m.source: m for m in reversed(found.matches)}  # per source, its first (best) match
        who = "someone else's content" if found.kind == "third_party" else "your own data"
        return f"from {who}: {_names([_quote(best[s]) for s in found.sources], '; ')}"
    if found.kind == "fact":
        return f"a server fact from {found.matches[0].source}"
    return {"typed": "typed by you", "model": "chosen by the model", "unknown": UNKNOWN}[found.kind]


def _detail(found: ValueOrigin) -> list[ProvenanceMatch]:
    return [ProvenanceMatch(token=m.token, source=str(m.source), call=m.source.call, trust=m.source.trust,
                            snippet=m.snippet, instructions=m.instructions) for m in found.matches[:8]]


def _names(items: Sequence[Any], sep: str = ", ") -> str:
    """The first two of ``items``, and how many more."""
    named = sep.join(str(s) for s in items[:2])
    return named + (f" and {len(items) - 2} more" if len(items) > 2 else "")


@dataclass(frozen=True, slots=True)
class _Traced:
    """Every value of a call traced to what the thread read."""

    labels: dict[str, str]
    detail: dict[str, list[ProvenanceMatch]]
    copied: dict[str, list[Match]]
    """Field -> its tokens found in someone else's content."""
    unknown: list[str]
    """Fields with a value whose origin could not be checked."""


def _trace(args: dict[str, Any], shown: Shown, skipped: set[str]) -> _Traced:
    traced = _Traced({}, {}, {}, [])
    for name, value in args.items():
        texts = _texts(value) if name not in skipped else []
        if not texts:
            continue
        origins = [origin(text, shown) for text in texts]
        traced.labels[name] = "; ".join(dict.fromkeys(_label(o) for o in origins))
        if any(o.kind in ("third_party", "owner") for o in origins):
            traced.detail[name] = [d for o in origins if o.kind in ("third_party", "owner") for d in _detail(o)][:8]
        traced.copied[name] = [m for o in origins if o.kind == "third_party" for m in o.matches
                               if m.source.trust == "third_party"]
        if any(o.kind == "unknown" for o in origins):
            traced.unknown.append(name)
    return traced


def _copy_warnings(args: dict[str, Any], traced: _Traced, shown: Shown, request: str) -> list[CardWarning]:
    """The warnings and notes for values copied from someone else's content."""
    out: list[CardWarning] = []
    for name, found in traced.copied.items():
        steered = [m for m in found if m.instructions]
        if steered:
            out.append(CardWarning(code="instructions", text=(
                f"⚠ {name} comes from text that gives an assistant instructions, in {_quote(steered[0])}. "
                "That is what a prompt injection looks like.")))
    # Content the request named is said, not warned about, unless a value repeats a run of its words
    # ("pay the bill in the invoice" takes its IBAN; it does not send the invoice's sentences as yours).
    unnamed = {n: [m for m in ms if not points_to(request, str(m.source), m.source.nouns)]
               or [q for t in _texts(args[n]) if (q := verbatim(t, shown)) is not None]
               for n, ms in traced.copied.items()}
    if any(unnamed.values()):
        said = "; ".join(f"{n} ({_quote(ms[0])})" for n, ms in unnamed.items() if ms)
        out.append(CardWarning(code="third_party_value", text=(
            f"⚠ From someone else's content, not from you: {said}. Check these before approving: "
            "a mail or a page can ask for anything.")))
    named = {n: ms for n, ms in traced.copied.items() if ms and not unnamed.get(n)}
    if named:
        said = "; ".join(f"{n} ({_quote(ms[0])})" for n, ms in named.items())
        out.append(CardWarning(code="named_content", text=f"ⓘ From the content you named: {said}."))
    return out


def card_for(spec: ActionSpec, args: dict[str, Any], shown: Shown, request: str, *,
             skip: Iterable[str] = (), server_built: bool = False) -> Card:
    """The card of a call of ``spec`` with ``args``, in a thread that read ``shown``, asked ``request``.

    ``skip`` names fields left out (id fields: id validation binds them to what the server listed,
    and the preview shows them by label); ``server_built`` is a call the server made from its own
    facts (the background offer): no value of it is the model's, and content did not suggest it.
    """
    traced = _trace({} if server_built else args, shown, set(skip))
    warnings: list[CardWarning] = []
    if spec.effect == "destructive":
        warnings.append(CardWarning(code="destructive", text=(
            "⚠ This cannot be undone: the deployment lets you approve this destructive action; nothing can restore it.")))
    if spec.description_withheld:
        warnings.append(CardWarning(code="instructions", text=(
            f"⚠ This tool's own description, from {spec.source_label or 'its provider'}, reads as instructions "
            "to an assistant; it was withheld from the model. Approve only what you asked for.")))
    third = shown.third_party
    if spec.writes and third and not server_built and not asked_for(
            request, intent_words(spec.name, spec.usage_examples, spec.intent_words)):
        what = spec.description.rstrip(".")
        warnings.append(CardWarning(code="not_requested", text=(
            f"⚠ Not what you asked for: your request did not ask for this ({what[:1].lower()}{what[1:]}). "
            f"It was suggested by content in {_names(third)}, not by your request.")))
    warnings += _copy_warnings(args, traced, shown, request)
    if traced.unknown:
        warnings.append(CardWarning(code="unknown_source", text=(
            f"⚠ Where {', '.join(traced.unknown)} came from could not be checked: part of what this "
            "conversation read could not be traced.")))
    if third and not any(traced.copied.values()) and not any(w["code"] == "not_requested" for w in warnings):
        warnings.append(CardWarning(code="read_content", text=(
            f"ⓘ This conversation read someone else's content ({_names(third)}); nothing on this card "
            "comes from it.")))
    return Card(traced.labels, traced.detail, warnings)


def unknown_card(spec: ActionSpec, args: dict[str, Any], *, skip: Iterable[str] = ()) -> Card:
    """The card when the provenance check could not run: every value of unknown source, never typed."""
    skipped = set(skip)
    fields = [n for n, v in args.items() if n not in skipped and _texts(v)]
    warnings: list[CardWarning] = []
    if fields:
        warnings.append(CardWarning(code="unknown_source", text=(
            f"⚠ Where {', '.join(fields)} came from could not be checked. Check every value before approving.")))
    return Card({n: UNKNOWN for n in fields}, {}, warnings)
