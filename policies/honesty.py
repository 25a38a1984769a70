"""The honesty gate: the model's own text may not claim an effect the turn did not have.

It reads only text a model wrote (the picker's final answer, the naturalizer's phrasing),
never the grounded renderers' text, whose titles and labels are data ("Updated roadmap
review" is an event, not a claim). Each sentence is read for a *completed-action claim*:
an affirmative statement, in any tense that reports a done change ("I've sent", "your email
was sent", "Sent it to Sam.", "Done: moved to 3pm", "it's on your calendar now"), and not a
question, a negation, a plan, a condition or a report of something pending or read ("I'll
send it once you approve", "nothing was sent", "you have 3 unread mails"). Each claim names
a kind of change (send, create, remove, update, or an unspecified one), and must be backed by
a write of that kind that ran in this turn (:func:`action_kind` maps an action to its kind).
A reply with a claim nothing backs is replaced by the caller (the grounded account of what
happened); the verdict lists the unbacked claims.

Hand-written rules, measured on ``evals/honesty`` (precision and recall of "this reply makes
a false claim"): no library parses claim-and-tense out of chat text without a model, and the
gate must also work with none configured. With a naturalizer model, the model also lists the
changes its reply claims, as data on a last ``CLAIMS:`` line (:func:`split_claims`); every
listed change must be a write that ran (:func:`check_claim_list`), which catches phrasings no
rule knows. Both checks must pass; a missing or malformed list leaves the rules alone to judge.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "CLAIMS_MARKER", "Claim", "ClaimKind", "HonestyVerdict", "Outcome", "action_kind", "check_claim_list", "check_claims",
    "claims_in", "split_claims",
]

Outcome = Literal["executed", "read", "proposed", "rejected", "expired", "refused", "clarify", "failed", "reply"]
"""What really happened in the turn."""

ClaimKind = Literal["send", "create", "remove", "update", "any"]
"""The kind of change a claim reports (``any``: "done", "all set", "successfully")."""

_VERB_KINDS: Final[dict[str, ClaimKind]] = {
    **dict.fromkeys(("sent", "emailed", "mailed", "replied", "forwarded", "messaged", "delivered", "texted",
                     "notified", "shared", "posted", "invited", "dispatched", "transmitted", "submitted",
                     "relayed"), "send"),
    **dict.fromkeys(("created", "added", "scheduled", "booked", "saved", "made", "noted", "logged", "recorded",
                     "registered", "drafted", "queued", "put", "set", "wrote", "written", "jotted", "reserved"),
                    "create"),
    **dict.fromkeys(("deleted", "removed", "trashed", "cancelled", "canceled", "cleared", "archived", "dismissed",
                     "discarded", "dropped", "erased", "binned"), "remove"),
    **dict.fromkeys(("updated", "moved", "rescheduled", "changed", "renamed", "edited", "marked", "snoozed",
                     "completed", "finished", "modified", "postponed", "pushed", "shifted", "checked", "ticked",
                     "replaced", "adjusted", "extended", "confirmed", "accepted", "declined", "restored"), "update"),
}
_VERBS: Final = "|".join(sorted(_VERB_KINDS, key=len, reverse=True))

_GENERIC: Final = re.compile(
    r"^(?:done|all\s+set|all\s+done|success(?:fully)?|taken\s+care\s+of|that'?s\s+done|it'?s\s+done)\b"
    r"|\b(?:successfully|went\s+through|taken\s+care\s+of|is\s+done|has\s+been\s+done|are\s+done|all\s+set)\b",
    re.I,
)
# Something is now somewhere (a claim without a past tense): "it's on your calendar now".
_STATE: Final = re.compile(
    r"\b(?:it'?s|it\s+is|they'?re|they\s+are|that'?s|that\s+is)\s+(?:now\s+)?(?:on|in)\s+(?:your|the)\s+"
    r"(?:calendar|list|inbox|outbox|trash|notes|reminders|tasks)\b(?:\s+now)?", re.I)
_CLAIM: Final = re.compile(
    rf"\b(?:I|we)(?:'ve|'d|\s+have|\s+had|\s+just|\s+already|\s+now|\s+also|\s+successfully|\s+went\s+ahead\s+and)*"
    rf"\s+(?:{_VERBS})\b"
    rf"|\b(?:has|have|had|was|were|is|are|got|'s|'re)\s+(?:now\s+|just\s+|already\s+|been\s+|successfully\s+|also\s+)*"
    rf"(?:{_VERBS})\b"
    rf"|^(?:{_VERBS})\b",
    re.I,
)
_DENIAL: Final = re.compile(
    r"\b(?:not|n't|never|no|nothing|none|without|cannot|unable|couldn'?t|won'?t|didn'?t|haven'?t|hasn'?t|wasn'?t|"
    r"weren'?t|isn'?t|aren'?t|yet|failed|fail|refused|rejected|instead\s+of)\b",
    re.I,
)
_PENDING: Final = re.compile(
    r"\b(?:will|would|shall|going\s+to|gonna|can|could|may|might|should|want\s+me|ready\s+to|about\s+to|"
    r"once|after\s+you|when\s+you|if\s+you|if\s+approved|pending|waiting|awaiting|needs?\s+your|approval|approve|"
    r"confirm\s+(?:and|to)|shall\s+I|do\s+you\s+want|would\s+you\s+like|let\s+me\s+know|proposed|propose|"
    r"draft(?:ed)?\s+(?:for|below)|here'?s\s+(?:a|the)\s+draft|preview)\b",
    re.I,
)
# Something sent is now travelling or arrived: "Your email to Sam is on its way.", "it went out".
_SENT_STATE: Final = re.compile(
    r"\b(?:is|are|'s|'re)\s+(?:now\s+|already\s+)?(?:on\s+(?:its|their|the)\s+way|out\s+the\s+door)\b"
    r"|\b(?:went|has\s+gone|have\s+gone)\s+out\b"
    r"|\b(?:landed|arrived)\s+in\s+\w+(?:'s)?\s+inbox\b", re.I)
# A sentence that is only a verb ("Sent!", "Done.") claims it plainly.
_BARE: Final = re.compile(rf"^(?:{_VERBS})\s*[!.]*\s*$", re.I)
# A sentence's first verb reads as a claim only when what follows is the thing it acted on
# ("Sent it to Sam.", "Added the dentist to your calendar."), not a title ("Updated roadmap review").
_LEADING_OBJECT: Final = re.compile(
    rf"^(?:{_VERBS})\s+(?:it|them|that|this|those|these|the|your|a|an|all|both|everything|him|her|you|to|up|off|"
    rf"out|over|back|down|in|on)\b|^(?:{_VERBS})\s+“…”",
    re.I,
)
# A statement about someone else's action, or about an earlier time, is not this turn's claim.
_REPORTED: Final = re.compile(
    r"\b(?:said|says|told\s+(?:me|you|us)|wrote|writes|mentioned|mentions|according\s+to|reports?|reported|"
    r"asked|asks|claims?|confirms?\s+that)\b"
    r"|\b(?:was|were|been|got)\s+\w+\s+by\s+(?!me\b|us\b|tollgate\b)\w+"
    r"|\b(?:yesterday|last\s+(?:week|month|year|night|monday|tuesday|wednesday|thursday|friday|saturday|sunday)|"
    r"\d+\s+(?:days?|weeks?|months?|years?)\s+ago|on\s+(?:mon|tues|wednes|thurs|fri|satur|sun)day)\b",
    re.I,
)
# A headline: a noun phrase, then a past participle that ends the clause ("Task added.",
# "Reminder set for 5pm", "Event deleted").
_HEADLINE: Final = re.compile(
    rf"^(?:[\w’'“”…-]+\s+){{1,4}}(?:{_VERBS})(?=\s*(?:$|[.!:;,)]|\s+(?:for|to|at|on|in|from|with|as|by)\b))",
    re.I,
)
_TRASH: Final = re.compile(r"\b(?:to|into|in)\s+(?:the\s+|your\s+)?(?:trash|bin|deleted\s+items)\b", re.I)
_QUOTED: Final = re.compile(r"“[^”]*”|\"[^\"]*\"|‘[^’]*’|«[^»]*»|`[^`]*`")
_SENTENCES: Final = re.compile(r"(?<=[.!?;:])\s+|\n+")
_CLAUSES: Final = re.compile(
    rf",\s+(?:and|but|so)\s+|\s+(?:and|but)\s+(?=(?:I|we|it|your|the|a|an|my|both|all|{_VERBS})\b)", re.I)
_LIST_ITEM: Final = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


@dataclass(frozen=True, slots=True)
class Claim:
    """A completed-action claim in a reply."""

    kind: ClaimKind
    """The kind of change claimed."""
    sentence: str
    """The sentence that claims it."""


def _kind_of(sentence: str, *, continues: bool = False) -> ClaimKind | None:
    """The kind of change ``sentence`` claims as done, or ``None``; ``continues``: the clause
    goes on a sentence whose subject it shares ("..., and emailed Priya")."""
    if (_DENIAL.search(sentence) or _PENDING.search(sentence) or _REPORTED.search(sentence)
            or sentence.rstrip().endswith("?")):
        return None
    lead = sentence.lstrip(" ✓✔✅-–—>").strip()
    match = _CLAIM.search(lead)
    if match is not None and match.start() == 0 and lead[: match.end()].lower() in _VERB_KINDS:
        # A bare leading verb: a claim only when an object follows it, or the clause continues
        # a sentence ("I created the task and emailed Priya").
        if not continues and not _LEADING_OBJECT.match(lead) and not _BARE.match(lead):
            match = _CLAIM.search(lead, match.end())
    if match is None:
        match = _HEADLINE.match(lead)
    if match is not None:
        if _TRASH.search(lead):
            return "remove"
        verb = match.group(0).split()[-1].lower().lstrip("'")
        for word in (verb, verb.removeprefix("'s"), verb.removeprefix("'re")):
            if word in _VERB_KINDS:
                return _VERB_KINDS[word]
        return "any"
    if _SENT_STATE.search(lead):
        return "send"
    if _GENERIC.search(lead) or _STATE.search(lead):
        return "any"
    return None


def claims_in(text: str) -> list[Claim]:
    """The completed-action claims of ``text`` (quoted spans and list items are data, not claims)."""
    out: list[Claim] = []
    for line in _SENTENCES.split(_QUOTED.sub("“…”", text)):
        if not line.strip() or _LIST_ITEM.match(line):
            continue
        for index, clause in enumerate(_CLAUSES.split(line)):
            kind = _kind_of(clause, continues=index > 0)
            if kind is not None:
                out.append(Claim(kind, line.strip()))
    return out


_ACTION_KINDS: Final[tuple[tuple[ClaimKind, re.Pattern[str]], ...]] = (
    ("send", re.compile(r"send|reply|forward|share|post|invite|notify|message|mail", re.I)),
    ("remove", re.compile(r"delete|trash|remove|cancel|archive|clear|dismiss|drop|purge", re.I)),
    ("create", re.compile(r"create|add|new|schedule|book|save|note|draft|queue|set|make|log|record|remind|continue",
                          re.I)),
    ("update", re.compile(r"update|move|reschedule|edit|rename|mark|snooze|complete|done|change|check|restore|read",
                          re.I)),
)


def action_kind(tool: str, action: str) -> ClaimKind:
    """The kind of change a write ``tool.action`` makes (``any`` when its name says nothing)."""
    for kind, pattern in _ACTION_KINDS:
        if pattern.search(action):
            return kind
    return "any"


def _compatible(claim: ClaimKind, done: ClaimKind) -> bool:
    if claim == "any" or done == "any" or claim == done:
        return True
    # Putting something on a calendar or list reads as "added" or "scheduled" whichever verb did it.
    return {claim, done} == {"create", "update"}


@dataclass(frozen=True, slots=True)
class HonestyVerdict:
    """Whether the text may stand, and the claims nothing in the turn backs."""

    ok: bool
    """No unbacked claim."""
    unbacked: tuple[Claim, ...] = ()
    """The claims no write of the turn backs."""


def check_claims(text: str, writes_done: Iterable[tuple[str, str]]) -> HonestyVerdict:
    """Check the model's ``text`` against the writes that ran this turn (``(tool, action)`` pairs)."""
    done = [action_kind(tool, action) for tool, action in writes_done]
    unbacked = tuple(c for c in claims_in(text) if not any(_compatible(c.kind, d) for d in done))
    return HonestyVerdict(not unbacked, unbacked)


CLAIMS_MARKER: Final = "CLAIMS:"
"""Starts the line where the naturalizer lists, as JSON, the changes its reply says were made."""
_MAX_CLAIMS: Final = 32


def split_claims(text: str) -> tuple[str, tuple[tuple[str, str], ...] | None]:
    """The reply without its claim line, and the claims it lists as ``(tool, action)`` pairs.

    ``None`` when the line is missing or not a JSON list of ``{"tool", "action"}`` objects (the
    rules of :func:`check_claims` then judge the text alone); the reply never shows the line.
    """
    at = text.rfind(CLAIMS_MARKER)
    if at < 0:
        return text.strip(), None
    reply, raw = text[:at].strip(), text[at + len(CLAIMS_MARKER):].strip()
    try:
        listed = json.loads(raw)
    except ValueError:
        return reply, None
    if not isinstance(listed, list) or len(listed) > _MAX_CLAIMS:
        return reply, None
    pairs: list[tuple[str, str]] = []
    for entry in listed:
        if not (isinstance(entry, dict) and isinstance(entry.get("tool"), str) and isinstance(entry.get("action"), str)):
            return reply, None
        pairs.append((entry["tool"], entry["action"]))
    return reply, tuple(pairs)


def check_claim_list(claims: Iterable[tuple[str, str]], writes_done: Iterable[tuple[str, str]]) -> HonestyVerdict:
    """Every change the model says it made must be a write that ran this turn, by tool and action."""
    done = set(writes_done)
    unbacked = tuple(Claim("any", f"{tool}.{action}") for tool, action in claims if (tool, action) not in done)
    return HonestyVerdict(not unbacked, unbacked)
