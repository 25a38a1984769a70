"""Routing by the registry's own usage examples, for the bound functions the grammar does not know.

The notes, the web tools and any plug-in carry usage examples in their function descriptions
(``Examples: "..."; "..."``, written by :meth:`tools.registry.Registry.function_schemas`). The
nearest example (the share of its words, weighted by how rare each word is among all examples,
that the request also has) picks the function; the words where the request differs from that
example fill its one free text argument (and an address fills a ``url``). A plug-in with good
examples is reachable offline without a line of grammar.

Hand-written rather than a library: the score has to come with the word alignment that fills
the argument, and both are a few lines over :mod:`difflib` (the menu's BM25 shortlist, in
:mod:`nodes.menu`, ranks functions but aligns nothing).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["ABOUT", "FILTER_FIELDS", "PLACE_FIELDS", "Example", "Match", "examples_of", "fill", "nearest", "place_in"]

_WORD: Final = re.compile(r"https?://\S+|[\w'@.-]+", re.UNICODE)
_EXAMPLES: Final = re.compile(r'Examples:\s*(.*)$', re.S)
_QUOTED: Final = re.compile(r'"([^"]+)"')
_STOP: Final = frozenset(
    "a an the my me i to of for in on at is are be it this that some any and or please can you could would will "
    "what's whats what do does did about with from".split()
)
_URL: Final = re.compile(r"https?://[^\s<>\"']+")
_PREFIX_SCORE: Final = 0.6
PLACE_FIELDS: Final = frozenset({"place", "city", "location", "town"})
_TRAILING_TIME: Final = re.compile(
    r"\s+(?:today|tonight|tomorrow|this\s+(?:week|weekend|morning|afternoon|evening)|next\s+week|right\s+now|now)\s*$", re.I)
_PREPOSITION: Final = re.compile(r"\b(?:in|for|at|near|around)\s+(.+)$", re.I)


def _words(text: str) -> list[str]:
    return [w.strip(".,!?:;").lower() for w in _WORD.findall(text) if w.strip(".,!?:;")]


@dataclass(frozen=True, slots=True)
class Example:
    """One usage example of one bound function."""

    function: str
    """The function's name (``tool__action``)."""
    text: str
    """The example, as the registry wrote it."""
    parameters: Mapping[str, Any]
    """The function's parameters schema."""


@dataclass(frozen=True, slots=True)
class Match:
    """The example nearest to a request."""

    example: Example
    score: float
    """The weighted share of the example's content words the request has (0-1). The nearest
    example is the one with the best balance of that share and the share of the request's own
    words it accounts for."""
    same_verb: bool
    """Whether the request opens with the example's first word (its verb, usually)."""
    fit: float = 0.0
    """The balance (harmonic mean) of ``score`` and the share of the request's own words the
    example accounts for: what the nearest example is chosen by."""


def examples_of(functions: Mapping[str, Mapping[str, Any]], descriptions: Mapping[str, str]) -> list[Example]:
    """Every usage example in ``descriptions`` (function name -> description), with its parameters."""
    out: list[Example] = []
    for name, description in descriptions.items():
        found = _EXAMPLES.search(description)
        if found is None:
            continue
        for text in _QUOTED.findall(found.group(1)):
            out.append(Example(name, text, functions.get(name) or {}))
    return out


def _content(words: Sequence[str]) -> list[str]:
    """The words that carry meaning, plurals read as their singular ("minutes" is "minute")."""
    return [w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
            for w in words if w not in _STOP and not w.startswith("http")]


def nearest(request: str, examples: Sequence[Example]) -> Match | None:
    """The example nearest to ``request``; ``None`` when none shares a content word."""
    if not examples:
        return None
    docs = [set(_content(_words(e.text))) for e in examples]
    df: dict[str, int] = {}
    for doc in docs:
        for word in doc:
            df[word] = df.get(word, 0) + 1
    asked = _words(request)
    have = set(_content(asked))
    # How much of the request an example accounts for, to choose between examples that the request
    # covers alike: "add flour to the pantry" covers all of "what's in the pantry" but is nearer
    # "add rice to the pantry". A word no example has weighs as the rarest do.
    rarest = math.log(1 + len(docs))
    asked_weight = sum(math.log(1 + len(docs) / df[w]) if w in df else rarest for w in have) or 1.0
    best: Match | None = None
    best_key: tuple[float, bool] = (0.0, False)
    for example, doc in zip(examples, docs, strict=True):
        if not doc:
            continue
        weights = {w: math.log(1 + len(docs) / df[w]) for w in doc}
        shared = sum(weight for w, weight in weights.items() if w in have)
        score = shared / sum(weights.values())
        if score <= 0:
            continue
        covered = shared / asked_weight
        example_words = _words(example.text)
        same_verb = bool(asked and example_words and asked[0] == example_words[0])
        if len(example_words) > 2 and asked[:2] == example_words[:2] and example_words[0] not in _STOP:
            # The request opens as the example does ("look up ...", "search the web ..."): the
            # example's command, whatever its own value words.
            score = max(score, _PREFIX_SCORE)
        key = (2 * score * covered / (score + covered), same_verb)
        if best is None or key > best_key:
            best, best_key = Match(example, score, same_verb, key[0]), key
    return best


def _free_text(request: str, example: str) -> str:
    """The request's words where it differs from ``example`` (the example's own value's place)."""
    asked = request.split()
    lowered = [w.strip(".,!?:;").lower() for w in asked]
    wanted = [w.strip(".,!?:;").lower() for w in example.split()]
    ops = difflib.SequenceMatcher(a=wanted, b=lowered, autojunk=False).get_opcodes()
    gaps = [(i2 - i1, j1, j2) for tag, i1, i2, j1, j2 in ops if tag in ("replace", "insert") and j2 > j1]
    if not gaps:
        # The request repeats the example ("make a note: ..."): what follows its colon, if any.
        _, colon, rest = request.partition(":")
        return rest.strip() if colon else ""
    if ops[0][0] == "equal" and ops[0][1] == 0 and ops[0][3] == 0 and all(op[0] != "equal" for op in ops[1:]):
        # The request opens with the example's command ("google", "note to self:") and shares
        # nothing after it: the rest is its value. ("add bread to the shopping list" shares the
        # example's tail, so its value is the gap: "bread".)
        return " ".join(asked[ops[0][4]:])
    _, j1, j2 = max(gaps, key=lambda g: (g[0], g[2] - g[1]))
    return " ".join(asked[j1:j2])


def place_in(request: str) -> str:
    """The place a request names after its preposition ("in Lyon"), title-cased when typed in lower case."""
    text = _TRAILING_TIME.sub("", request.strip().rstrip("?.!"))
    found = _PREPOSITION.search(text)
    value = (found.group(1) if found else "").strip(" ,")
    value = _TRAILING_TIME.sub("", value)
    return value.title() if value == value.lower() else value


ABOUT: Final = re.compile(r"\b(?:about|containing|mentioning|on)\s+(?:the\s+|my\s+)?(.+?)[?.!]*$", re.I)
FILTER_FIELDS: Final = frozenset({"contains", "query", "q", "search"})


def fill(request: str, match: Match, given: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """Arguments for the matched function from ``request``; ``None`` when a required one has no value.

    Fields in ``given`` (ids the caller resolved) are kept. A ``url`` field takes the first
    http(s) address; a place field the words after its preposition ("in Lyon"); the one other
    required text field the words where the request differs from the example (or what follows
    its colon); an optional filter field (``contains``) what the request says it is "about".
    Other fields keep their defaults.
    """
    schema = match.example.parameters
    props: Mapping[str, Any] = schema.get("properties") or {}
    required = [str(name) for name in schema.get("required") or ()]
    args: dict[str, Any] = dict(given or {})
    for name in props:
        if name in FILTER_FIELDS and name not in required and name not in args:
            about = ABOUT.search(request)
            if about is not None:
                args[name] = about.group(1).strip()[:100]
    text_fields = []
    for name in required:
        if name in args:
            continue
        prop = props.get(name) or {}
        if name == "url" or prop.get("format") == "uri":
            found = _URL.search(request)
            if found is None:
                return None
            args[name] = found.group(0).rstrip(".,!?)")
        elif name in PLACE_FIELDS:
            value = place_in(request)
            if not value:
                return None
            args[name] = value
        elif prop.get("type") == "string" or "anyOf" not in prop:
            text_fields.append(name)
    if len(text_fields) > 1:
        return None
    if text_fields:
        value = _free_text(request, match.example.text).strip(" :,-").strip()
        value = re.sub(r"^(?:that|about|for|on|:)\s+", "", value, flags=re.I).rstrip("?.!").strip()
        if not value:
            return None
        limit = (props.get(text_fields[0]) or {}).get("maxLength")
        args[text_fields[0]] = value[: int(limit)] if isinstance(limit, int) else value
    return args
