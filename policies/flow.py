"""Information flow: does a call that sends text outside carry what the model was shown?

The server knows what it gave the model: the user's own words, and everything the tools returned
(the owner's mail, calendar, tasks and notes; third-party mail, invitations, pages and search
results). An outbound call (a search query, a URL to fetch, a weather location, any argument of
a tool whose effect leaves Tollgate) is judged by what its values may derive from, computed here
from those texts and never taken from the model:

* a value **carries shown data** when it shares a span of :data:`SPAN_WORDS` consecutive words
  (after NFKC, case folding and dropping punctuation) with a tool result of the turn or of the
  window of earlier turns, and that span is not also in the user's own words;
* a value **carries contact data** when it holds an e-mail address or a phone number the user
  did not type (wherever the model got it).

Splitting tricks are met by judging a call's values together with the outbound values that
already left in this turn (:func:`carried` takes them as ``earlier``), so a secret sent half in
one search and half in the next is judged whole. Limits, plainly: a paraphrase, a translation,
a summary or an encoding of shown text shares no span and passes; so does a fact shorter than
three words that is not a contact ("12:30", a surname alone). What this catches is copying,
which is what an injected instruction most often asks for.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

__all__ = ["SPAN_WORDS", "Carried", "FlowMode", "Origin", "Shown", "carried", "origin_of", "shown_from"]

FlowMode = Literal["off", "approve", "refuse"]
"""What an outbound call that carries shown or contact data gets: nothing, an approval, a refusal."""

SPAN_WORDS: Final = 3
"""Consecutive words a value must share with shown data to carry it."""
_MAX_SPANS: Final = 50_000
"""Spans kept from shown data (the newest results first), so a huge page cannot cost unbounded memory."""

_WORD: Final = re.compile(r"[^\W_]+", re.UNICODE)
_EMAIL: Final = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
# A phone number: international (+ and 8-15 digits) or grouped by spaces or dashes; never a
# dotted address, a date (2026-12-01) or a bare run of digits (an id, an amount).
_PHONE: Final = re.compile(
    r"(?<![\w+.:/-])(?:\+\d[\d ()-]{6,18}\d|\(?\d{2,4}\)?[ -]\d{2,4}[ -]\d{2,4}(?:[ -]\d{2,4}){0,3})(?![\w.:/-])")
_DATE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# A server fact: a time (ISO 8601 date or date-time) or an id (a prefix, an underscore, a token),
# as the tools write them. Copying one is no leak of text; it is labelled as what it is.
_FACT: Final = re.compile(r"^(?:\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})?)?"
                          r"|[a-z]{2,8}_[A-Za-z0-9]{6,40})$")


def _fact_key(text: str) -> str:
    """A server fact as compared: a date-time as its UTC instant (``…Z`` and ``+00:00`` alike), else as is."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    return moment.astimezone(UTC).isoformat() if moment.tzinfo is not None else moment.isoformat()


def _words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def _spans(words: list[str]) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + SPAN_WORDS]) for i in range(len(words) - SPAN_WORDS + 1)}


def _contacts(text: str) -> set[str]:
    found = {m.group().casefold() for m in _EMAIL.finditer(text)}
    for match in _PHONE.finditer(text):
        digits = re.sub(r"\D", "", match.group())
        if 8 <= len(digits) <= 15 and not _DATE.match(match.group()):
            found.add(digits)
    return found


@dataclass(frozen=True, slots=True)
class Shown:
    """What the turn showed the model, indexed: spans of tool results (each with where it came
    from), and the user's own spans and contacts."""

    spans: Mapping[tuple[str, ...], str] = field(default_factory=dict)
    """Each span of shown tool results, with the call that returned it (``tool.action``)."""
    user_spans: frozenset[tuple[str, ...]] = frozenset()
    """Spans of the user's own words (they may go out freely)."""
    user_contacts: frozenset[str] = frozenset()
    """E-mail addresses and phone numbers the user typed."""
    contacts: Mapping[str, str] = field(default_factory=dict)
    """Each e-mail address and phone number of shown tool results, with where it came from."""
    third_party: frozenset[str] = frozenset()
    """The sources that are someone else's content (others' mail, pages, search results)."""
    facts: Mapping[str, str] = field(default_factory=dict)
    """Each server fact (a time, as its UTC instant; an id) a tool result held as a whole value, with where it came from."""


def shown_from(
    results: Iterable[tuple[str, str]], user_texts: Iterable[str], third_party: Iterable[str] = ()
) -> Shown:
    """Index ``results`` (``(source, text)`` pairs, newest first) and the user's words; the
    ``third_party`` sources are someone else's content rather than the owner's own."""
    spans: dict[tuple[str, ...], str] = {}
    contacts: dict[str, str] = {}
    facts: dict[str, str] = {}
    for source, text in results:
        if _FACT.match(text):  # a time or an id: a fact as a whole, never a span of text
            facts.setdefault(_fact_key(text), source)
            continue
        for span in _spans(_words(text)):
            spans.setdefault(span, source)
        for contact in _contacts(text):
            contacts.setdefault(contact, source)
        if len(spans) >= _MAX_SPANS:
            break
    user = list(user_texts)
    user_spans = frozenset(s for text in user for s in _spans(_words(text)))
    user_contacts = frozenset(c for text in user for c in _contacts(text))
    return Shown(spans, user_spans, user_contacts, contacts, frozenset(third_party), facts)


Origin = Literal["user", "shown", "fact", "model"]
"""Where an argument's value came from: typed by the user, copied from a tool result, a server fact
(a time or an id a tool returned), or none of these (the model's own)."""


def origin_of(value: str, shown: Shown) -> tuple[Origin, str]:
    """Where ``value`` came from, and (for ``shown``) the result it copies.

    A value's contacts decide first (a recipient is its address), then its spans: copied from a
    result when any span or contact matches one there and not the user's words; typed when all
    of it is the user's; otherwise the model's own.
    """
    if _FACT.match(value) and _fact_key(value) in shown.facts:
        return "fact", shown.facts[_fact_key(value)]
    if _FACT.match(value):  # a time or an id nobody returned: the model's (its digits are no text to match)
        return "model", ""
    contacts = _contacts(value)
    for contact in sorted(contacts):
        if contact not in shown.user_contacts and contact in shown.contacts:
            return "shown", shown.contacts[contact]
    spans = _spans(_words(value))
    for span in sorted(spans):
        if span in shown.spans and span not in shown.user_spans:
            return "shown", shown.spans[span]
    if (contacts and contacts <= shown.user_contacts) or (spans and spans <= shown.user_spans):
        return "user", ""
    words = _words(value)
    if words and not spans and all(any(w in s for s in shown.user_spans) for w in words):
        return "user", ""  # a short value whose every word the user said
    return "model", ""


@dataclass(frozen=True, slots=True)
class Carried:
    """What an outbound call carries, by kind, and from where."""

    sources: tuple[str, ...] = ()
    """The calls whose results it copies (``tool.action``), sorted."""
    contacts: bool = False
    """It holds an e-mail address or phone number the user did not type."""

    @property
    def clean(self) -> bool:
        """Nothing but the user's words and what is neither shown nor contact data."""
        return not self.sources and not self.contacts


def carried(values: Iterable[str], shown: Shown, earlier: Iterable[str] = ()) -> Carried:
    """What ``values`` (an outbound call's strings) carry, judged together with the ``earlier``
    outbound values of the turn (a span that straddles two calls counts)."""
    mine = list(values)
    before = [w for text in earlier for w in _words(text)][-(SPAN_WORDS - 1):] if SPAN_WORDS > 1 else []
    words = before + [w for text in mine for w in _words(text)]
    # Only spans that reach into this call's words: what already went out was judged then.
    spans = {tuple(words[i : i + SPAN_WORDS]) for i in range(len(words) - SPAN_WORDS + 1)}
    sources = {shown.spans[s] for s in spans if s in shown.spans and s not in shown.user_spans}
    contacts = any(c not in shown.user_contacts for text in mine for c in _contacts(text))
    return Carried(tuple(sorted(sources)), contacts)
