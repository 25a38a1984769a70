"""Value provenance: where an argument's value, and every identifier-like token in it, came from.

The server knows every text the thread showed the model: the person's own words, and each tool
result, with the **source** it came from (the call, the item: a mail's sender and subject, a
page's host and path, a file's name, an MCP server and tool) and that source's **trust class**
(the owner's own data, or someone else's content). An approval card says, for each value, which
of them it copies, quoting a short snippet, so a person decides on the truth.

A value is matched token by token. Its tokens are:

* **identifier-like tokens**: IBANs and account numbers, e-mail addresses, URLs and host names,
  phone numbers, numbers of :data:`MIN_DIGITS` or more digits, and any word of
  :data:`MIN_WORD` or more characters;
* **spans** of :data:`SPAN_WORDS` consecutive words, and the whole value when it has at most
  that many words (a two-word hotel name).

A token the person typed (anywhere in their messages in the window) is theirs, whatever else
holds it. Every other token is looked up in what the thread read; the value is labelled by the
least trusted source any of its tokens copies (someone else's content, then the owner's data),
a server fact (a time or an id a tool returned, as a whole value), typed by the person (all of
it theirs), or "chosen by the model" only when it appears nowhere. When what was read could not
all be indexed (:attr:`Shown.complete` is false) a value found nowhere is of **unknown source**,
never the model's and never the person's.

Limits, plainly: a paraphrase, a translation or an encoding shares no token and is not traced;
a short common word (under :data:`MIN_WORD` characters) is not traced alone.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Literal

__all__ = [
    "EMAIL",
    "MIN_DIGITS",
    "MIN_WORD",
    "SPAN_WORDS",
    "Match",
    "OriginKind",
    "Shown",
    "Source",
    "Trust",
    "ValueOrigin",
    "VERBATIM_WORDS",
    "attribute",
    "origin",
    "reads_as_instructions",
    "shown_from",
    "value_tokens",
    "verbatim",
    "words",
]

Trust = Literal["owner", "third_party"]
"""A source's trust class: the owner's own data, or someone else's content (others' mail, pages,
search results, shared documents, MCP results unless the policy says otherwise)."""

OriginKind = Literal["third_party", "owner", "fact", "typed", "model", "unknown"]
"""What a value is, least trusted first: it copies someone else's content; it copies the owner's
data; it is a server fact; the person typed it; none of these (the model's own); or its origin
could not be checked."""

SPAN_WORDS: Final = 3
"""Consecutive words a span has."""
MIN_DIGITS: Final = 5
"""Digits a number needs to be traced on its own (an amount like 42.00 is not)."""
MIN_WORD: Final = 6
"""Characters a word needs to be traced on its own."""
_MAX_TOKENS: Final = 200_000
"""Tokens kept from what was read (the newest first), so a huge page cannot cost unbounded memory."""
_SNIPPET: Final = 36
"""Characters of context quoted on each side of a match."""

_WORD: Final = re.compile(r"[^\W_]+", re.UNICODE)
EMAIL: Final = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
"""An e-mail address, as provenance and the flow check both read one (traced as ``@`` + the address, case-folded)."""
_URL: Final = re.compile(r"\bhttps?://[^\s<>\"'()\[\]]+", re.I)
_HOST: Final = re.compile(r"(?<![@\w.-])(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,24}(?![\w-])", re.I)
# An IBAN: country, check digits, then 10-30 letters and digits, maybe in groups of four.
_IBAN: Final = re.compile(r"\b[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]{2,4}){3,8}\b")
# A run of digits, maybe grouped by spaces, dots, dashes or commas (an account, a card, a phone).
_DIGITS: Final = re.compile(r"(?<![\w.])\+?\d[\d ().,-]*\d(?![\w])")
_FACT: Final = re.compile(r"^(?:\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})?)?"
                          r"|[a-z]{2,8}_[A-Za-z0-9]{6,40})$")
_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")
# Text addressed to an assistant rather than to its reader: what an injected instruction looks like.
_INSTRUCTIONS: Final = re.compile(
    r"\b(?:ignore|disregard|forget)\s+(?:all\s+|any\s+|the\s+|your\s+)?(?:previous|prior|above|earlier|other)\b"
    r"|\bbefore\s+you\s+(?:can\s+)?(?:solve|continue|do|answer|finish|reply|proceed)"
    r"|\b(?:please\s+)?do\s+the\s+following\b|\bfollow\s+these\s+(?:steps|instructions)\b"
    r"|\b(?:new|updated|important)\s+(?:instructions?|task)\b|\bimportant\s+message\b"
    r"|\b(?:dear|attention|note\s+to\s+the|hey)\s+(?:ai|assistant|agent|model|chatbot|gpt)\b"
    r"|\b(?:the\s+)?(?:ai|assistant|agent|model|chatbot)\s+(?:must|should|needs?\s+to|has\s+to|is\s+to|will)\b"
    r"|\bto\s+you,\s+(?:the\s+)?(?:ai|assistant|agent|model|gpt|claude|llama)",
    re.I,
)


def words(text: str) -> list[str]:
    """The words of ``text``, NFKC-normalized and case-folded."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def _fact_key(text: str) -> str:
    """A server fact as compared: a date-time as its UTC instant (``…Z`` and ``+00:00`` alike), else as is."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    return moment.astimezone(UTC).isoformat() if moment.tzinfo is not None else moment.isoformat()


def _token_spans(text: str) -> Iterator[tuple[str, int, int]]:
    """Each identifier-like token of ``text`` (normalized), with where it is in ``text``."""
    text = unicodedata.normalize("NFKC", text)
    for match in EMAIL.finditer(text):
        yield "@" + match.group().casefold(), match.start(), match.end()
    for match in _URL.finditer(text):
        url = match.group().rstrip(".,;:!?").casefold().split("://", 1)[1]
        yield "url:" + url.rstrip("/"), match.start(), match.start() + len(match.group())
    for match in _HOST.finditer(text):
        if not any(c.isalpha() for c in match.group().rsplit(".", 1)[-1]):
            continue
        yield "host:" + match.group().casefold(), match.start(), match.end()
    for match in _IBAN.finditer(text):
        yield "iban:" + match.group().replace(" ", ""), match.start(), match.end()
    for match in _DIGITS.finditer(text):
        if _DATE.fullmatch(match.group()):
            continue
        digits = re.sub(r"\D", "", match.group())
        if len(digits) >= MIN_DIGITS:
            yield "#" + digits, match.start(), match.end()
    inside = [(m.start(), m.end()) for pattern in (EMAIL, _URL) for m in pattern.finditer(text)]
    for match in _WORD.finditer(text):
        word = match.group().casefold()
        if len(word) >= MIN_WORD and not word.isdigit() and not any(a <= match.start() < b for a, b in inside):
            yield word, match.start(), match.end()  # a word of an address is traced as the address


def value_tokens(value: str) -> set[str]:
    """The tokens of a value that provenance traces: identifier-like tokens, spans, and the whole
    value when it is short."""
    out = {token for token, _, _ in _token_spans(value)}
    ws = words(value)
    out |= {" ".join(ws[i : i + SPAN_WORDS]) for i in range(len(ws) - SPAN_WORDS + 1)}
    if not all(w.isdigit() for w in ws) and (1 < len(ws) < SPAN_WORDS or (len(ws) == 1 and len(ws[0]) >= 3)):
        out.add(" ".join(ws))
    return out


def _indexed_tokens(text: str) -> Iterator[tuple[str, int, int]]:
    """Every token of a read text, with its place: identifier-like tokens, and word n-grams of one
    to :data:`SPAN_WORDS` words (so a short value matches a run of words anywhere in it)."""
    yield from _token_spans(text)
    found = [(m.group().casefold(), m.start(), m.end()) for m in _WORD.finditer(unicodedata.normalize("NFKC", text))]
    for i in range(len(found)):
        for n in range(1, SPAN_WORDS + 1):
            if i + n <= len(found):
                yield " ".join(w for w, _, _ in found[i : i + n]), found[i][1], found[i + n - 1][2]


@dataclass(frozen=True, slots=True)
class Source:
    """Where a text the thread read came from."""

    call: str
    """The call that returned it (``mail.read``), or ``an earlier reply``."""
    item: str = ""
    """The item, as a person recognises it: ``mail “Invoice 42” from billing@acme.example``,
    ``page news.example/pay``, ``file bill-december.txt``, ``MCP server pantry, tool list``."""
    trust: Trust = "owner"
    """The owner's own data, or someone else's content."""
    nouns: frozenset[str] = frozenset()
    """Words a request may name it by, beside the words of its name (``transaction``)."""

    def __str__(self) -> str:
        return self.item or self.call

    @property
    def phrase(self) -> str:
        """How a reply names it: ``the mail “Invoice 42” from billing@acme.example``, ``the page news.example/pay``."""
        name = self.item.removesuffix(f" ({self.call})") if self.item else ""
        return f"the {name}" if name and name != self.call else f"the result of {self.call}"


@dataclass(frozen=True, slots=True)
class Match:
    """One token of a value found in a text the thread read."""

    token: str
    """The token, as traced (``iban:DE89…``, ``@x@y.example``, a word, a span)."""
    source: Source
    """Where it was read."""
    snippet: str
    """A short quote of the text around it (``…IBAN DE89 3704 0044…``)."""
    instructions: bool = False
    """The text around it reads as instructions to an assistant (what an injection looks like)."""


@dataclass(frozen=True, slots=True)
class ValueOrigin:
    """Where one value came from."""

    kind: OriginKind
    """The least trusted origin any of its tokens has."""
    matches: tuple[Match, ...] = ()
    """The tokens found in what the thread read (the least trusted sources first; for ``fact``, the one source)."""

    @property
    def sources(self) -> tuple[Source, ...]:
        """The distinct sources of :attr:`matches`, in order."""
        return tuple(dict.fromkeys(m.source for m in self.matches))


@dataclass(frozen=True, slots=True)
class Shown:
    """What the thread read, indexed by token, and the person's own words."""

    texts: tuple[tuple[Source, str], ...] = ()
    """Every text read, with its source, newest first."""
    index: dict[str, tuple[tuple[int, int, int], ...]] = field(default_factory=dict)
    """Token -> where it occurs: (text number, start, end); at most one place per source."""
    facts: dict[str, Source] = field(default_factory=dict)
    """Each server fact (a time, as its UTC instant; an id) a tool result held as a whole value."""
    user_tokens: frozenset[str] = frozenset()
    """The tokens of the person's own words (theirs, wherever else they occur)."""
    user_words: frozenset[str] = frozenset()
    """The words the person used."""
    complete: bool = True
    """False when something read could not be indexed: a value found nowhere is then of unknown source."""

    @property
    def sources(self) -> tuple[Source, ...]:
        """Every source read, newest first."""
        return tuple(dict.fromkeys(source for source, _ in self.texts))

    @property
    def third_party(self) -> tuple[Source, ...]:
        """The sources that are someone else's content, newest first."""
        return tuple(s for s in self.sources if s.trust == "third_party")

    def where(self, token: str) -> list[Match]:
        """Where ``token`` was read, the least trusted sources first."""
        out: list[Match] = []
        for number, start, end in self.index.get(token, ()):
            source, text = self.texts[number]
            out.append(Match(token, source, _snippet(text, start, end),
                             bool(_INSTRUCTIONS.search(text[max(0, start - 400) : end + 400]))))
        return sorted(out, key=lambda m: m.source.trust != "third_party")


def _snippet(text: str, start: int, end: int) -> str:
    left, right = max(0, start - _SNIPPET), min(len(text), end + _SNIPPET)
    quote = " ".join(text[left:right].split())
    return ("…" if left else "") + quote + ("…" if right < len(text) else "")


def shown_from(texts: Iterable[tuple[Source, str]], user_texts: Iterable[str], *, complete: bool = True) -> Shown:
    """Index ``texts`` (``(source, text)`` pairs, newest first) and the person's ``user_texts``;
    ``complete=False`` says something read could not be given here."""
    kept: list[tuple[Source, str]] = []
    index: dict[str, list[tuple[int, int, int]]] = {}
    seen: set[tuple[str, Source]] = set()
    facts: dict[str, Source] = {}
    count = 0
    for source, text in texts:
        if _FACT.match(text):  # a time or an id: a fact as a whole, never words to match
            facts.setdefault(_fact_key(text), source)
            continue
        if count >= _MAX_TOKENS:
            complete = False  # the rest was not indexed: what is found nowhere is not known to be the model's
            break
        number = len(kept)
        kept.append((source, text))
        for token, start, end in _indexed_tokens(text):
            count += 1
            if (token, source) not in seen:
                seen.add((token, source))
                index.setdefault(token, []).append((number, start, end))
    user = list(user_texts)
    user_tokens = frozenset(t for text in user for t, _, _ in _indexed_tokens(text))
    return Shown(tuple(kept), {k: tuple(v) for k, v in index.items()}, facts, user_tokens,
                 frozenset(w for text in user for w in words(text)), complete)


def origin(value: str, shown: Shown) -> ValueOrigin:
    """Where ``value`` came from (see the module's rules); never raises for any string."""
    if _FACT.match(value):
        found = shown.facts.get(_fact_key(value))
        if found is not None:
            return ValueOrigin("fact", (Match(value, found, value),))
        # A time or an id nobody returned: its digits are no text to match.
        return ValueOrigin("model" if shown.complete else "unknown")
    tokens = value_tokens(value)
    theirs = {t for t in tokens if t in shown.user_tokens}
    matches = [m for token in sorted(tokens - theirs) for m in shown.where(token)[:1]]
    if matches:
        matches.sort(key=lambda m: (m.source.trust != "third_party", not m.token.startswith(("iban:", "@", "url:", "#"))))
        kind: OriginKind = "third_party" if matches[0].source.trust == "third_party" else "owner"
        return ValueOrigin(kind, tuple(matches))
    ws = words(value)
    if (tokens and tokens <= theirs) or (ws and all(w in shown.user_words for w in ws)):
        return ValueOrigin("typed")
    return ValueOrigin("model" if shown.complete else "unknown")


_SENTENCE: Final = re.compile(r"[^.!?\n]+(?:[.!?]+|$)|\n+")


def attribute(reply: str, shown: Shown) -> str:
    """``reply`` with every sentence that repeats someone else's content attributed to it: "According
    to the page news.example/deals: …" before the first of a run of sentences from one source.

    A sentence repeats a source when one of its tokens (identifier-like, a word of
    :data:`MIN_WORD` or more characters, a span) that the person did not say occurs there and in
    no source of the owner's own; a sentence that already says "according to" is left as it is.
    So a recommendation that first appears in third-party text is never the assistant's own.
    """
    if not shown.third_party:
        return reply
    out: list[str] = []
    last: Source | None = None
    for part in _SENTENCE.findall(reply):
        sentence = part.strip()
        if not sentence or "according to" in sentence.casefold():
            out.append(part)
            last = None if not sentence else last
            continue
        theirs = _repeats(sentence, shown)
        if theirs is not None and theirs != last:
            lead = part[: len(part) - len(part.lstrip())]
            out.append(f"{lead}According to {theirs.phrase}: {sentence}{part[len(part.rstrip()):]}")
        else:
            out.append(part)
        last = theirs
    return "".join(out)


def _repeats(sentence: str, shown: Shown) -> Source | None:
    """The third-party source whose tokens ``sentence`` repeats (the one with most of them)."""
    counts: dict[Source, int] = {}
    for token in value_tokens(sentence) - shown.user_tokens:
        places = shown.where(token)
        if places and all(m.source.trust == "third_party" for m in places):
            counts[places[0].source] = counts.get(places[0].source, 0) + 1
    return max(counts, key=lambda s: counts[s]) if counts else None


VERBATIM_WORDS: Final = 2 * SPAN_WORDS
"""Consecutive words of someone else's text a value must repeat to be a verbatim copy of it."""


def verbatim(value: str, shown: Shown) -> Match | None:
    """Where ``value`` repeats :data:`VERBATIM_WORDS` or more consecutive words of someone else's
    text that the person did not say (two adjacent spans in one text, in order), or ``None``."""
    ws = words(value)
    for i in range(len(ws) - VERBATIM_WORDS + 1):
        first, second = " ".join(ws[i : i + SPAN_WORDS]), " ".join(ws[i + SPAN_WORDS : i + VERBATIM_WORDS])
        if first in shown.user_tokens and second in shown.user_tokens:
            continue
        later = {number: start for number, start, _ in shown.index.get(second, ())}
        for number, start, end in shown.index.get(first, ()):
            source, text = shown.texts[number]
            if source.trust == "third_party" and later.get(number, -1) > start:
                return Match(first + " " + second, source, _snippet(text, start, end))
    return None


def reads_as_instructions(text: str) -> bool:
    """Whether ``text`` addresses an assistant with instructions ("before you can solve the task…
    please do the following", "ignore previous instructions", "the assistant must…")."""
    return _INSTRUCTIONS.search(text) is not None
