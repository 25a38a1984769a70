"""Intent: did the person's request ask for this action, and did it point at that source?

Both are judged on the request's words alone (case-folded, NFKC), never on the model's output.

**Asked for.** An action is *asked for* by a request when the request uses one of the
action's intent words as its verb: as the request's first word, or the first word of a clause
(after ``,.;:!?`` or one of :data:`OPENERS`: "and", "then", "please", "to", "you"...) that is
not a question (one beginning with a word of :data:`QUESTIONS`). So "read my newest email" does
not ask to send one, "what did I pay last month?" asks for no payment, and "can you email Sam" does. A word matches when the request has it as a word, up to an ending
(``s``, ``es``, ``d``, ``ed``, ``ing``: "pays", "invited", "booking"). An action's intent
words (:func:`intent_words`) are the words it declares, the first word of its name with that
verb's synonyms in :data:`VERBS` ("send": email, mail, reply, forward, tell, write, message...),
and the first word of each of its usage examples that is not a filler ("please", "can", "I").
So "pay the bill in the invoice" asks for a payment declared with ``pay``, and "invite the
people listed on that page" asks for ``calendar.create`` (``create``: add, invite, schedule...);
"what does my newest mail say?" asks for no write at all.

**Points to.** A request *points to* a source when it names it: one of the source's words of
three or more letters (the item's subject, title, file name, sender, host and path, and the
call's tool and action names), or a noun for its kind ("mail", "page", "file", "review", …) in
:data:`KIND_NOUNS`, matched the same way.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Final

__all__ = ["FILLERS", "KIND_NOUNS", "OPENERS", "QUESTIONS", "VERBS", "asked_for", "intent_words", "points_to", "source_words", "verbs_of"]

VERBS: Final[dict[str, frozenset[str]]] = {
    "send": frozenset({"send", "email", "mail", "reply", "respond", "answer", "forward", "tell", "write", "message",
                       "notify", "ask", "inform", "share", "pay", "transfer", "invite"}),
    "create": frozenset({"create", "add", "new", "make", "put", "schedule", "book", "set", "invite", "plan",
                         "arrange", "organise", "organize", "note", "jot", "save", "log", "record", "remind",
                         "reserve", "register", "enter", "start"}),
    "update": frozenset({"update", "change", "edit", "move", "rename", "reschedule", "shift", "make", "set",
                         "modify", "fix", "correct", "extend", "shorten", "push", "invite", "add"}),
    "cancel": frozenset({"cancel", "drop", "remove", "delete", "stop", "call", "decline", "scrap", "kill", "end",
                         "turn", "disable"}),
    "trash": frozenset({"trash", "delete", "remove", "bin", "discard", "get", "clean", "clear"}),
    "archive": frozenset({"archive", "put", "file", "hide", "remove", "drop"}),
    "complete": frozenset({"complete", "finish", "finished", "done", "tick", "check", "mark", "close"}),
    "mark": frozenset({"mark", "flag"}),
    "snooze": frozenset({"snooze", "push", "delay", "postpone", "later", "remind"}),
    "reserve": frozenset({"reserve", "book"}),
    "pay": frozenset({"pay", "transfer", "send", "payment", "wire"}),
}
"""Synonyms of the verbs that begin action names, as requests say them."""

FILLERS: Final = frozenset({"please", "can", "could", "would", "will", "you", "i", "i'd", "i'm", "hey", "ok", "okay",
                            "now", "then", "also", "and", "the", "a", "an", "to", "when", "whenever", "if", "just"})
"""Words that begin a usage example without saying what it does."""

OPENERS: Final = (FILLERS - {"the", "a", "an"}) | frozenset({
    "and", "then", "also", "please", "pls", "kindly", "to", "you", "we", "us", "me", "let", "lets", "want", "like",
    "need", "should", "must", "go", "ahead", "so", "but", "or", "first", "next", "finally", "after",
    "i'll", "i've", "we'll", "don't", "do", "mind", "help"})
"""Words after which the next word is in a verb's place ("can you *pay*", "I'd like to *book*")."""

QUESTIONS: Final = frozenset({"what", "which", "who", "whom", "whose", "why", "where", "how", "did", "does", "was",
                              "were", "is", "are", "have", "has", "had", "when", "what's", "where's", "who's"})
"""Words that begin a question: the rest of that clause asks about something, not for an action."""

KIND_NOUNS: Final[dict[str, frozenset[str]]] = {
    "mail": frozenset({"mail", "email", "message", "inbox", "letter", "invoice", "bill", "sender", "newsletter"}),
    "page": frozenset({"page", "site", "website", "link", "article", "url", "web", "post", "listing", "list"}),
    "file": frozenset({"file", "document", "doc", "attachment", "pdf", "sheet", "spreadsheet", "bill", "invoice"}),
    "MCP": frozenset({"server", "tool"}),
}
"""Nouns a request may name a source's kind by (the first word of the card's source name)."""

_WORD: Final = re.compile(r"[^\W_]+", re.UNICODE)
_ENDINGS: Final = ("", "s", "es", "d", "ed", "ing", "ings")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def _same(a: str, b: str) -> bool:
    """Whether two words are one, up to an ending (``pay``/``pays``, ``invite``/``invited``/``inviting``)."""
    if a == b:
        return True
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long == short + end or (short.endswith("e") and long == short[:-1] + end) for end in _ENDINGS[1:])


def _has(said: set[str], wanted: Iterable[str]) -> bool:
    """Whether ``said`` has one of ``wanted``, up to an ending."""
    wanted = set(wanted)
    return bool(said & wanted) or any(_same(a, b) for a in said for b in wanted)


def intent_words(action: str, usage_examples: Iterable[str], declared: Iterable[str] = ()) -> frozenset[str]:
    """The words that ask for an action called ``action`` (see the module's rule)."""
    verb = action.split("_", 1)[0].casefold()
    out = set(w.casefold() for w in declared) | {verb} | set(VERBS.get(verb, ()))
    for example in usage_examples:
        first = next((w for w in _WORD.findall(example.casefold()) if w not in FILLERS and w not in OPENERS
                      and not w.isdigit()), None)
        if first is not None:
            out.add(first)
    return frozenset(out)


_CLAUSE: Final = re.compile(r"[^\W_]+(?:'[a-z]+)?|[,.;:!?]", re.UNICODE)


def verbs_of(request: str) -> set[str]:
    """The words of ``request`` in a verb's place: its first word, and each clause's first word."""
    out: set[str] = set()
    start, question = True, False
    for token in _CLAUSE.findall(unicodedata.normalize("NFKC", request).casefold()):
        if token in ",.;:!?":
            start, question = True, False
        elif question:
            continue
        elif start and token in QUESTIONS:
            question = True  # "what did I pay?" asks about, not for
        elif token in OPENERS or token.split("'")[0] in OPENERS:
            start = True
        else:
            if start:
                out.add(token)
            start = False
    return out


def asked_for(request: str, words: Iterable[str]) -> bool:
    """Whether ``request`` asks for the action whose intent words are ``words`` (in a verb's place)."""
    return _has(verbs_of(request), words)


def source_words(name: str) -> frozenset[str]:
    """The words a request may name a source by, from its card name (``mail “Invoice 42” from
    billing@acme.example (mail.read)``): its words of three or more letters, and its kind's nouns."""
    found = {w for w in _words(name) if len(w) >= 3 and not w.isdigit()}
    kind = name.split(" ", 1)[0]
    return frozenset(found | set(KIND_NOUNS.get(kind, ())))


def points_to(request: str, source_name: str, nouns: Iterable[str] = ()) -> bool:
    """Whether ``request`` names the source called ``source_name``, or by one of its ``nouns``
    (those its action declares), as the module's rule says."""
    generic = {"from", "the", "and", "item", "com", "org", "net", "example", "www", "http", "https", "read",
               "list", "get", "fetch", "search"}
    return _has(_words(request), (source_words(source_name) - generic) | set(nouns))
