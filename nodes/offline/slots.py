"""Filling a bound function's arguments from a request, driven by its parameters schema.

For the functions the grammar does not know (a plug-in's, an MCP server's, a LangChain tool's),
the picker has their JSON schema and their usage examples. Each field is filled by its type:

* an address (``format: uri`` or a field named ``url``/``link``): the request's first URL;
* an e-mail address (``format: email`` or a field named like one): the request's address;
* a choice (``enum``): the value the request names (``"groceries"``, ``"high priority"``);
* a number or an integer: the request's numbers in order (``9.99``, ``€12``, ``3 kg``), never
  the digits of a date or a time; a ``currency`` field takes the amount's currency;
* a date or a time (``format: date``/``date-time``, or a field named ``date``, ``due``...):
  the request's time phrase, through the same grammar as the built-in tools;
* a boolean: true when the request names it ("with gift wrap", "express"), false when it
  negates it ("no gift wrap", "not urgent", "express: off"); a required one it does not name is asked;
* a place (``place``, ``city``...): the words after its preposition ("in Lyon"); an optional
  filter (``contains``, ``query``): what the request says it is "about";
* required text: the words where the request differs from the example, once everything above
  is cut out (with one text field; with more, each takes the words after its own name, or the
  cue words that usually introduce it: "as", "called", "titled" for a title). Optional text is
  never guessed.

What a required field cannot be given comes back as :class:`Missing`, naming it, so the picker
asks for exactly that. Never a guess: a field with two candidate values is missing too.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tollgate.nodes.offline.examples import ABOUT, FILTER_FIELDS, PLACE_FIELDS, place_in
from tollgate.nodes.offline.times import When

__all__ = ["EMAIL", "Missing", "fill_slots", "takes_email", "without_tool_clause"]

_URL: Final = re.compile(r"https?://[^\s<>\"']+[^\s<>\"'.,!?)]")
EMAIL: Final = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_CONVERTED_TO: Final = re.compile(r"\b(?:to|into|in)\s+([a-z]+)\b", re.I)
_CURRENCY_SIGNS: Final = {"$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY"}
_CURRENCY_WORDS: Final = {"usd": "USD", "dollar": "USD", "dollars": "USD", "bucks": "USD", "eur": "EUR", "euro": "EUR",
                          "euros": "EUR", "gbp": "GBP", "pound": "GBP", "pounds": "GBP", "quid": "GBP", "jpy": "JPY",
                          "yen": "JPY", "chf": "CHF", "francs": "CHF", "cad": "CAD", "aud": "AUD"}
_NUMBER: Final = re.compile(
    r"(?P<sign>[$€£¥])?\s?(?P<value>\d+(?:[.,]\d{1,2})?(?:\.\d+)?)\b\s?(?P<unit>[a-zA-Z]{1,10}\b)?")
_EMAIL_NAMES: Final = frozenset({"email", "e_mail", "to", "recipient", "address", "email_address"})
_URL_NAMES: Final = frozenset({"url", "link", "href", "address_url", "website"})
_DATE_NAMES: Final = frozenset({"date", "day", "due", "due_date", "due_on", "when", "at", "on", "starts_at", "start",
                                "deadline", "time"})
_CUES: Final[dict[str, tuple[str, ...]]] = {
    "title": ("as", "called", "named", "titled"),
    "name": ("called", "named"),
    "description": ("for", "on"),
    "note": ("saying", "that"),
}
_LEADING: Final = re.compile(r"^(?:that|about|for|on|as|called|named|titled|to|of|:|-)\s+", re.I)
_ARTICLE: Final = re.compile(r"^(?:a|an|some)\s+", re.I)
_NEGATED: Final = (r"(?:\bwith\s+|(?P<no>\b(?:not|no|non|without|don'?t\s+(?:want|need)|do\s+not\s+(?:want|need))"
                   r"[\s-]+))?")
_AFTER: Final = r"(?:\s*[:=]?\s*(?P<after>yes|true|on|no|false|off)\b)?"


def _boolean_said(request: str, name: str) -> tuple[bool, tuple[int, int]] | None:
    """Whether the request says the flag ``name`` (``gift_wrap``: "with gift wrap" is true, "no
    gift wrap" or "gift wrap: off" false), and where; ``None`` when it does not name it."""
    words = re.sub(r"^(?:is|has|should|needs?|wants?)_", "", name).replace("_", " ")
    found = re.search(rf"{_NEGATED}\b{re.escape(words)}\b{_AFTER}", request, re.I)
    if found is None:
        return None
    off = found.group("no") is not None or (found.group("after") or "").lower() in ("no", "false", "off")
    return not off, found.span()


@dataclass(frozen=True, slots=True)
class Missing:
    """A required field the request gives no value for (or two values, so none is sure)."""

    field: str
    """The field's name."""
    description: str
    """What the schema says of it (may be empty)."""

    def question(self) -> str:
        """The one question that asks for it, by its name (its description after it, when it has one)."""
        asked = f"What {self.field.replace('_', ' ')} should I use?"
        return f"{asked} ({self.description.rstrip('.')}.)" if self.description else asked


def _is_email_field(name: str, prop: Mapping[str, Any]) -> bool:
    return _kind(prop).get("format") == "email" or name.lower() in _EMAIL_NAMES


def takes_email(schema: Mapping[str, Any]) -> bool:
    """Whether a function has a field the filler gives an e-mail address."""
    return any(_is_email_field(str(name), prop) for name, prop in (schema.get("properties") or {}).items())


def _kind(prop: Mapping[str, Any]) -> Mapping[str, Any]:
    """A field's schema, without the ``null`` of an optional field (``anyOf: [X, {type: null}]``)."""
    options = [p for p in prop.get("anyOf") or () if p.get("type") != "null"]
    return {**prop, **options[0]} if len(options) == 1 else prop


@dataclass
class _Request:
    text: str
    used: list[tuple[int, int]]

    def free(self, start: int, end: int) -> bool:
        return not any(s < end and start < e for s, e in self.used)

    def take(self, start: int, end: int) -> None:
        self.used.append((start, end))

    def rest(self) -> str:
        """The request with every used span cut out."""
        out, last = [], 0
        for start, end in sorted(self.used):
            if start >= last:
                out.append(self.text[last:start])
                last = end
        out.append(self.text[last:])
        return re.sub(r"\s+", " ", " ".join(out)).strip()


def _numbers(req: _Request) -> list[tuple[float, str | None, tuple[int, int]]]:
    """Every number of the request outside the spans already used (dates, times): value, currency, span."""
    out = []
    for m in _NUMBER.finditer(req.text):
        start, end = m.start("value") - (1 if m.group("sign") else 0), m.end("value")
        if not req.free(m.start("value"), m.end("value")):
            continue
        unit = (m.group("unit") or "").lower()
        currency = _CURRENCY_SIGNS.get(m.group("sign") or "") or _CURRENCY_WORDS.get(unit)
        if currency and unit in _CURRENCY_WORDS:
            end = m.end("unit")
        out.append((float(m.group("value").replace(",", ".")), currency, (max(start, 0), end)))
    return out


def _words(text: str) -> list[str]:
    return [w.strip(".,!?:;\"'").lower() for w in text.split() if w.strip(".,!?:;\"'")]


def _differing(request: str, example: str) -> list[str]:
    """The request's runs of words where it differs from ``example``, longest first; a request
    that opens with another verb than the example's ("save" for "bookmark") does not make that
    verb a value."""
    asked = request.split()
    lowered = [w.strip(".,!?:;\"'").lower() for w in asked]
    ops = difflib.SequenceMatcher(a=_words(example), b=lowered, autojunk=False).get_opcodes()
    if ops and ops[0][0] == "equal" and ops[0][1] == 0 and ops[0][3] == 0 and ops[0][4] < len(asked):
        # The request opens with the example's command ("google", "log ... for"): the rest is its value.
        return [" ".join(asked[ops[0][4]:])]
    gaps = []
    for tag, i1, i2, j1, j2 in ops:
        if tag not in ("replace", "insert") or j2 <= j1:
            continue
        if tag == "replace" and i1 == 0 and j1 == 0:
            j1 += min(i2 - i1, 1)  # the opening verb, said another way
        if j2 > j1:
            gaps.append((j2 - j1, " ".join(asked[j1:j2])))
    return [text for _, text in sorted(gaps, key=lambda g: -g[0])]


def without_tool_clause(value: str, tool: str) -> str:
    """``value`` without a closing clause that names ``tool`` ("flour to the pantry" -> "flour")."""
    noun = re.escape(tool.rstrip("s"))
    return re.sub(rf"\s*\b(?:as|to|in|into|on|for|from|onto)\s+(?:(?:a|an|the|my|our)\s+)?{noun}s?\b.*$", "", value,
                  flags=re.I).strip()


def _clean(value: str, tool: str = "") -> str:
    """A value without the words around it: leading cues and articles, trailing prepositions,
    and a closing clause that names the tool itself ("... as an expense", "... to the pantry")."""
    value = value.strip(" :,-\"'").strip()
    if tool:
        value = without_tool_clause(value, tool)
    while (stripped := _LEADING.sub("", value)) != value:
        value = stripped
    value = re.sub(r"\s+\b(?:in|to|into|on|for|at|from|as|with|by)$", "", value.rstrip("?.!,"), flags=re.I)
    return _ARTICLE.sub("", value).strip()


def _after_cue(text: str, cues: Sequence[str]) -> str:
    for cue in cues:
        found = re.search(rf"\b{re.escape(cue)}\s+(.+)$", text, re.I)
        if found:
            return found.group(1)
    return ""


def _stripped_example(example: str) -> str:
    """The example with its own typed values (addresses, numbers) cut out, to align text against."""
    text = _URL.sub(" ", example)
    text = EMAIL.sub(" ", text)
    return re.sub(r"[$€£¥]?\d+(?:[.,]\d+)?", " ", text)


def fill_slots(request: str, example: str, schema: Mapping[str, Any], *, given: Mapping[str, Any] | None = None,
               when: Callable[[str], When | None] | None = None, tool: str = "") -> dict[str, Any] | Missing:
    """Arguments for a function with parameters ``schema`` from ``request`` (matched to its usage
    ``example``); the first required field without a sure value as :class:`Missing`.

    ``given`` fields (ids the caller resolved) are kept; ``when`` reads a time phrase in the
    owner's clock and zone (no dates are filled without it); ``tool`` is the function's tool,
    whose name in the request is a command word, never a value.
    """
    props: Mapping[str, Any] = schema.get("properties") or {}
    required = [str(name) for name in schema.get("required") or ()]
    args: dict[str, Any] = dict(given or {})
    req = _Request(request, [])
    # Addresses first: "https://news.example.org/today" holds no time phrase, whatever it spells.
    addresses = [(m.start(), m.end()) for pattern in (_URL, EMAIL) for m in pattern.finditer(request)]
    blanked = "".join(" " if any(s <= i < e for s, e in addresses) else ch for i, ch in enumerate(request))
    takes_date = any(_kind(p).get("format") in ("date", "date-time") or str(n).lower() in _DATE_NAMES
                     for n, p in props.items())
    # Without a date field, "morning news" is a title and "25 minutes" a number: no time phrase is read.
    found_when = when(blanked) if when is not None and takes_date else None
    if found_when is not None:
        for span in found_when.spans:
            req.take(*span)  # the time phrase is nobody's text, nor its digits a number
    order = [*required, *(name for name in props if name not in required)]
    texts: list[str] = []
    amounts = _numbers(req)
    currency_of_amount: str | None = None
    for name in order:
        if name in args:
            continue
        prop = _kind(props.get(name) or {})
        kind, fmt, lowered = prop.get("type"), prop.get("format"), name.lower()
        is_required = name in required
        if fmt == "uri" or lowered in _URL_NAMES:
            url = next((m for m in _URL.finditer(request) if req.free(m.start(), m.end())), None)
            if url is not None:
                args[name] = url.group(0)
                req.take(url.start(), url.end())
        elif _is_email_field(name, prop):
            emails = [m for m in EMAIL.finditer(request) if req.free(m.start(), m.end())]
            if len(emails) == 1:
                args[name] = emails[0].group(0)
                req.take(emails[0].start(), emails[0].end())
        elif prop.get("enum"):
            values = [v for v in prop["enum"] if isinstance(v, str)]
            hits = [(m.start(), m.end(), v) for v in values
                    for m in [re.search(rf"\b{re.escape(v.replace('_', ' '))}\b", request, re.I)] if m and req.free(m.start(), m.end())]
            if lowered == "currency" and not hits and currency_of_amount in values:
                args[name] = currency_of_amount
            elif len({v for _, _, v in hits}) == 1:
                args[name] = hits[0][2]
                req.take(hits[0][0], hits[0][1])
        elif kind in ("number", "integer"):
            usable = [a for a in amounts if kind == "number" or a[0].is_integer()]
            if usable:
                value, currency, span = usable[0]
                amounts.remove(usable[0])
                args[name] = value if kind == "number" else int(value)
                currency_of_amount = currency_of_amount or currency
                req.take(*span)
        elif lowered == "currency" and kind == "string":
            # "convert 45 euros to dollars": a currency the request converts *to* is the field's;
            # otherwise the amount's own ("log 12 euros for lunch").
            target = _CONVERTED_TO.search(request)
            if target is not None and _CURRENCY_WORDS.get(target.group(1).lower()) and req.free(*target.span()):
                args[name] = _CURRENCY_WORDS[target.group(1).lower()]
                req.take(*target.span())
            elif currency_of_amount:
                args[name] = currency_of_amount
        elif fmt in ("date", "date-time") or lowered in _DATE_NAMES:
            if found_when is not None and (fmt != "date-time" or found_when.at is not None):
                moment = found_when.at if fmt == "date-time" or (found_when.at is not None and fmt != "date") else None
                args[name] = moment.isoformat() if moment is not None else found_when.day.isoformat()
        elif kind == "boolean":
            said = _boolean_said(request, name)
            if said is not None and req.free(*said[1]):
                args[name] = said[0]
                req.take(*said[1])
        elif lowered in PLACE_FIELDS:
            place = place_in(request)
            if place:
                args[name] = place
        elif lowered in FILTER_FIELDS and not is_required:
            about = ABOUT.search(request)
            if about is not None:
                args[name] = about.group(1).strip()[:100]
        elif (kind == "string" or kind is None) and is_required:
            texts.append(name)  # an optional text is never guessed from the request's leftovers
    if texts:
        rest = req.rest()
        if len(texts) == 1:
            field = texts[0]
            gaps = _differing(rest, _stripped_example(example))
            value = _clean(gaps[0], tool) if gaps else ""
            if not value or _words(rest) == _words(_stripped_example(example)):
                value = _clean(_after_cue(rest, _CUES.get(field, ())) or _after_cue(rest, (":",)), tool) or value
            if not value and len(rest.split()) > 1:
                # The request is the example itself ("add rice to the pantry"): what follows its verb.
                value = _clean(rest.split(maxsplit=1)[1], tool)
            if value:
                limit = (props.get(field) or {}).get("maxLength") or _kind(props.get(field) or {}).get("maxLength")
                args[field] = value[: int(limit)] if isinstance(limit, int) else value
        else:
            for field in texts:
                cues = (field.replace("_", " "), *_CUES.get(field.lower(), ()))
                value = _clean(_after_cue(rest, cues), tool)
                if value:
                    args[field] = value
    for name in required:
        if name not in args:
            prop = props.get(name) or {}
            return Missing(name, str(prop.get("description") or _kind(prop).get("description") or ""))
    return args
