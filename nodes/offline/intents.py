"""The offline picker's decision: one request plus its context -> a call, a reply or a question.

In order: a request that completes the picker's own question (a time, an address) completes
the request it asked about; "it" and "my 3pm" are rewritten to the item they mean, and a
negated clause is scoped away from the one that asks ("don't send anything yet, just show me
my inbox"); small talk, help, yes and no; requests outside every tool and note-taking
(:mod:`nodes.offline.scope`); bound functions the grammar does not know, when the request names
their tool (:mod:`nodes.offline.examples`); then the grammar.

The grammar routes by the verb that opens the request (after politeness is stripped), then by
the kind of item: a noun in the request ("the 2nd email"), a label match in one recent list
("the standup"), or the kind listed last. Requests whose mood says they do not ask for a write
(past questions, hypotheticals, negations, reported speech, conditions) are routed as usual and
then downgraded: a write becomes a read of the same kind (past questions) or a plain reply. A
question the grammar would ask is first offered to the other bound functions' examples;
anything that maps to nothing becomes a short clarifying question, never a guessed write.
"""

from __future__ import annotations

import re
from calendar import month_name
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from tollgate.nodes.offline import events, mail, reminders, rules, todo
from tollgate.nodes.offline.examples import Example, Match, fill, nearest
from tollgate.nodes.offline.slots import EMAIL, Missing, fill_slots, takes_email, without_tool_clause
from tollgate.nodes.offline.functions import KNOWN
from tollgate.nodes.offline.moods import Mood, is_standalone_no, is_yes, mood_of, small_talk_reply
from tollgate.nodes.offline.plan import Call, Direct, Plan, Reply, Turn, clarify, reply
from tollgate.nodes.offline.pronouns import resolve_references
from tollgate.nodes.offline.scope import NOTE_TAKING, out_of_scope
from tollgate.nodes.offline.refs import find_positions, match_rows, names_an_item
from tollgate.nodes.offline.select import KINDS, cut, kind_named, kinds_named, without_times
from tollgate.nodes.offline.text import normalize
from tollgate.nodes.offline.verbs import head_verb, verb_after_time

__all__ = ["Routes", "decide"]

_CAPS: Final = re.compile(
    r"^(?:help|menu|commands|capabilities|what\s+(?:else\s+)?can\s+(?:you|i)\s+(?:do|ask|say|help\s+(?:me\s+)?with)(?:\s+(?:for\s+me|here|with\s+you))?"
    r"|what\s+are\s+(?:your|you)\s+(?:capabilities|skills|features|able\s+to\s+do)|what\s+do\s+you\s+(?:do|support|know\s+how\s+to\s+do)"
    r"|how\s+(?:can|do)\s+you\s+help(?:\s+me)?|what\s+tools\s+do\s+you\s+have|what\s+are\s+you\s+(?:for|capable\s+of)|what\s+is\s+this)[\s?!.]*$",
    re.I,
)
_CAL_QUESTION: Final = re.compile(
    r"\b(?:what\s+do\s+i\s+have|what\s+have\s+i\s+got|am\s+i\s+(?:free|busy|available)|any(?:thing)?\s+(?:on|planned|scheduled|happening)"
    r"|what'?s\s+(?:on|happening|planned|next|up|coming\s+up)|do\s+i\s+have\s+anything|what'?s\s+my\s+day|plans?\b|busy|free\b|where\s+do\s+i\s+need\s+to\s+be"
    r"|how\s+(?:does|do|is)\s+.+\s+look(?:ing)?|(?:week|day)\s+ahead|coming\s+week|next\s+few\s+days"
    r"|(?:overview|rundown|summary)\s+of\s+(?:my\s+|the\s+)?(?:day|week|morning|afternoon))",
    re.I,
)
_LIST_WORDS: Final = re.compile(r"\b(?:show|list|check|see|view|get|give|what|which|any|how\s+many|do\s+i\s+have|is\s+there|are\s+there|read\s+me)\b", re.I)
_TODO_QUESTION: Final = re.compile(
    r"\b(?:am\s+i|i'?m)\s+(?:late|behind)\s+(?:on|with)\b|\boverdue\b|\bwhat\s+(?:have|did)\s+i\s+(?:finished|finish|completed|complete|done|get\s+done)\b"
    r"|\bwhat\s+(?:else\s+)?(?:do\s+i|should\s+i|have\s+i\s+got)\s+(?:still\s+)?(?:need|have|got)\s+to\s+do\b|\bwhat'?s\s+(?:left|still)\s+to\s+do\b"
    r"|\bwhat'?s\s+(?:on\s+)?my\s+plate\b",
    re.I,
)
_MAIL_QUESTION: Final = re.compile(
    r"^(?:anything|any(?:thing)?\s+(?:new\s+)?(?:mail|e-?mails?|messages?)|something)\s+from\s+(?:my\s+|the\s+)?\w"
    r"|\bwhat\s+(?:did|have)\s+i\s+(?:sent|send)\b", re.I)
_GENERAL_QUESTION: Final = re.compile(
    r"^(?:can|could|do|does|is|are|will)\s+(?:an?\s+|the\s+)?(?:e-?mails?|mails?|messages?|events?|meetings?|reminders?|tasks?)\s+(?:be|get|ever)\b",
    re.I,
)
_OPINION: Final = re.compile(r"^(?:\w+[,!]\s*)?i\s+(?:hate|love|like|dislike|can't\s+stand|am\s+tired\s+of|'m\s+tired\s+of|wish)\b", re.I)
_WHEN_WHERE: Final = re.compile(r"^(?:when|where|what\s+time)(?:\s+is|'s)\b", re.I)
_FOLLOW_UP: Final = re.compile(r"^(?:and|what|how)\s+(?:about|of)\b|^and\b|^also\b", re.I)


def _label_kinds(turn: Turn, target: str) -> list[str]:
    target = without_times(turn, target)
    out = []
    for kind in KINDS:
        rows = turn.recent.get(kind)
        if rows:
            matches = match_rows(target, rows)
            if matches:
                out.append(kind)
    return out


def _kind(turn: Turn, text: str, allowed: tuple[str, ...]) -> str | None:
    """The kind a verb acts on: named, else the one recent list the label matches, else the latest."""
    named = [k for k in kinds_named(text) if k in allowed]
    if named:
        return named[0]
    by_label = [k for k in _label_kinds(turn, text) if k in allowed]
    if len(by_label) == 1:
        return by_label[0]
    # The latest list only stands in for a reference that names nothing itself ("the 2nd one",
    # "it"); "the standup" matching no list at all is not about the latest list.
    names = names_an_item(without_times(turn, text))
    if turn.latest_kind in allowed and (find_positions(text) is not None or not (by_label or names)):
        return turn.latest_kind
    prior_kind = kind_named(turn.prior[-1]) if turn.prior else None
    if prior_kind in allowed and find_positions(text) is not None:
        return prior_kind
    return None


def _list_of(turn: Turn, kind: str, text: str | None = None) -> Plan:
    if kind == "mail":
        return mail.list_mail(turn, text)
    if kind == "calendar":
        return events.list_events(turn, text)
    if kind == "tasks":
        return todo.list_tasks(turn, text)
    return reminders.list_reminders(turn, text)


def _read(turn: Turn, kind: str, text: str) -> Plan:
    has_ref = find_positions(text) is not None or bool(turn.recent.get(kind) and match_rows(text, turn.recent[kind]))
    if kind == "mail" and (has_ref or re.search(r"\b(?:the|that|this)\s+(?:e-?mail|message|mail)\s+from\b", text, re.I)):
        return mail.read_mail(turn, text)
    if kind == "calendar" and has_ref:
        return events.get_event(turn, text)
    return _list_of(turn, kind, text)


def _route(turn: Turn, verb: str | None) -> Plan:
    text = turn.text
    if verb == "remind":
        return reminders.create_reminder(turn)
    if verb == "send":
        return mail.send_mail(turn)
    if verb == "forward":
        replied = mail.reply(turn)
        if replied is not None:
            return replied
        return clarify(
            "I can't reply to or forward a message directly. Tell me the address and what to say, "
            "and I'll draft a new email."
        )
    if verb == "snooze":
        return reminders.snooze_reminder(turn)
    if verb == "mark":
        if re.search(r"\b(?:as\s+)?unread\s*[.!?]*$|\bunread\s+(?:again|instead)\b", text, re.I):
            return clarify("I can't mark mail as unread. Do you want to mark something as read instead?")
        if re.search(r"\b(?:read|seen|opened)\b", text, re.I):
            return mail.mark_read(turn)
        if re.search(r"\b(?:done|complete[d]?|finished|finish)\b", text, re.I):
            return todo.complete_task(turn)
        return clarify("Mark it as what — read (mail) or done (a task)?")
    if verb == "complete":
        return todo.complete_task(turn)
    if verb in {"trash", "cancel"}:
        # mail can be trashed but not cancelled: a cancel only looks at mail when it names it
        allowed = ("mail", "calendar", "reminders", "tasks") if verb == "trash" else ("calendar", "reminders", "tasks")
        kind = "mail" if verb == "cancel" and kind_named(text) == "mail" else _kind(turn, text, allowed)
        if kind == "mail":
            if verb == "cancel":
                return clarify("A sent email can't be recalled. Did you mean to move a message to the trash?")
            return mail.trash_mail(turn)
        if kind == "calendar":
            return events.cancel_event(turn, re.sub(r"^\S+(?:\s+(?:off|out|away|of))?", " ", text))
        if kind == "reminders":
            return reminders.cancel_reminder(turn)
        if kind == "tasks":
            return clarify("I can't delete tasks, but I can mark one as done. Which task?")
        return clarify("Which one do you mean — an email, an event or a reminder? Its name or list number helps.")
    if verb == "event":
        named = kind_named(text)
        if named == "reminders":
            return reminders.create_reminder(turn)
        if named == "tasks":
            return todo.create_task(turn)
        return events.create_event(turn)
    if verb == "add":
        named = kind_named(text)
        if named == "reminders":
            return reminders.create_reminder(turn)
        if named == "tasks" or re.search(r"\b(?:list|todo)\b", text, re.I):
            return todo.create_task(turn)
        if named == "calendar" or (turn.now is not None and turn.tz is not None and _has_clock(turn)):
            return events.create_event(turn)
        return todo.create_task(turn)
    if verb == "update":
        kind = _kind(turn, text, ("calendar", "reminders", "tasks", "mail"))
        if kind == "reminders":
            if re.search(r"\b(?:push|postpone|delay|later|back|bump)\b", text, re.I):
                return reminders.snooze_reminder(turn)
            return clarify("I can snooze a reminder (push it later), or cancel it and set a new one. Which one?")
        if kind == "tasks":
            return clarify("I can't edit tasks yet — I can add a new one or mark one done.")
        if kind == "mail":
            return clarify("I can read, send, trash or mark mail as read. What would you like to do?")
        return events.update_event(turn)
    if verb is None and _implicit_event(turn):
        return events.create_event(turn)
    return _route_read(turn, verb)


def _has_clock(turn: Turn) -> bool:
    assert turn.now is not None and turn.tz is not None
    when = turn.when(turn.text)
    return when is not None and when.at is not None


def _points_at_item(text: str) -> bool:
    """Whether ``text`` points at particular rows ("the 2nd one", "it"), not a count ("top 5")."""
    positions = find_positions(text)
    return positions is not None and positions.mode in ("items", "that")


def _only_a_time(turn: Turn, text: str) -> bool:
    """Whether ``text`` is nothing but a time phrase ("this week", "tomorrow?"): a follow-up."""
    if turn.now is None or turn.tz is None:
        return False
    when = turn.when(text)
    if when is None:
        return False
    rest = cut(text, when.spans)
    return not re.sub(r"\b(?:and|for|what|about|how|then|also|on|in|at|the)\b|\W", "", rest, flags=re.I)


def _route_read(turn: Turn, verb: str | None) -> Plan:
    text = turn.text
    if _GENERAL_QUESTION.search(text):
        return reply(
            "I can only act on your own mail, calendar, tasks and reminders. "
            "Ask me to do something specific and I'll tell you if I can."
        )
    if verb is None and _OPINION.search(text) and not _LIST_WORDS.search(text) and "?" not in text:
        return clarify("I hear you. Is there something I can do — check your calendar, mail, tasks or reminders?")
    named = kind_named(text)
    if named is not None:
        return _read(turn, named, text) if verb == "read" or _points_at_item(text) else _list_of(turn, named, text)
    if _TODO_QUESTION.search(text):
        return todo.list_tasks(turn, text)
    if _MAIL_QUESTION.search(text):
        return mail.list_mail(turn, text)  # "what did i send?" before the read verb ("what did X send") takes it
    if re.search(r"\bon\s+the\s+\d{1,2}(?:st|nd|rd|th)\b", text, re.I) and turn.when(text) is not None:
        return events.list_events(turn, text)  # "anything on the 15th?" is a day, not a list position
    if verb == "read" or _points_at_item(text):
        kind = _kind(turn, text, KINDS)
        if kind is None and _WHEN_WHERE.search(text) and "calendar" in _label_kinds(turn, text):
            kind = "calendar"  # "when's lunch?" asks about an event, even if a mail mentions lunch
        if kind is not None:
            return _read(turn, kind, text)
        if _WHEN_WHERE.search(text):
            return events.list_events(turn, "upcoming")
        return clarify("Which list do you mean — your mail, calendar, tasks or reminders?")
    if _FOLLOW_UP.search(text) and len(text.split()) <= 8 or _only_a_time(turn, text):
        kind = turn.latest_kind or (kind_named(turn.prior[-1]) if turn.prior else None) or "calendar"
        if kind in KINDS:
            return _list_of(turn, kind, text)
    if _CAL_QUESTION.search(text):
        return events.list_events(turn, text)
    if mail.wrote_to_me(text) or _MAIL_QUESTION.search(text):
        return mail.list_mail(turn, text)
    if turn.latest_kind == "mail" and re.search(r"\b(?:unread|new)\s+ones?\b|^(?:just|only)\s+(?:the\s+)?unread\b", text, re.I):
        return mail.list_mail(turn, "unread")
    if turn.now is not None and turn.tz is not None and _LIST_WORDS.search(text):
        if turn.when(text) is not None:
            return events.list_events(turn, text)
    # The server's own summary of what is enabled (plug-ins and the web included), not a fixed list.
    offer = turn.capabilities.split(". ")[0].rstrip(".") if turn.capabilities else \
        "I can help with your mail, calendar, tasks and reminders"
    return clarify(
        f"Sorry, I'm not sure what you'd like me to do. {offer} — "
        "for example “what's on my calendar today?” or “remind me to call mom at 6pm”."
    )


def _downgrade(turn: Turn, mood: Mood, core: str, plan: Call) -> Plan:
    """The plan for a write mentioned in a mood that does not ask for it."""
    if mood == "past":
        tool, action = plan.key
        if tool == "mail":
            folder = {"send": "sent", "trash": "trash"}.get(action)
            args: dict[str, Any] = {"folder": folder} if folder else {}
            if folder == "sent" and isinstance(plan.args.get("to"), list) and plan.args["to"]:
                args["from_contains"] = str(plan.args["to"][0])[:100]
            return Call(("mail", "list"), args)
        if tool == "calendar":
            return events.list_events(turn, core)
        if tool == "tasks":
            return Call(("tasks", "list"), {"status": "done" if action == "complete" else "all"})
        return Call(("reminders", "list"), {"status": "all"})
    return _mood_reply(mood)


def _mood_reply(mood: Mood) -> Plan:
    if mood == "negated":
        return reply("OK, I won't do that.")
    if mood == "statement":
        return reply("Got it. If you want me to change anything, just tell me what to do.")
    if mood == "hypothetical":
        return reply(
            "That's your call. If you'd like me to do it, just ask directly — anything that changes your data "
            "waits for your approval first."
        )
    return clarify("Do you want me to do that now? If so, ask me directly and I'll prepare it for your approval.")


def _past_read(turn: Turn, core: str, verb: str | None) -> Plan | None:
    """A past question with no routable write ("is the standup cancelled?"): read its kind."""
    if verb == "send":
        args: dict[str, Any] = {"folder": "sent"}
        who = mail.recipient_hint(core)
        if who is not None:
            args["from_contains"] = who[:100]
        return Call(("mail", "list"), args)
    kind = _kind(turn, core, KINDS)
    if kind is None and verb in {"cancel", "event", "update"}:
        kind = "calendar"  # "did I cancel the offsite?": only events are cancelled and moved
    if kind is None:
        return None
    if kind == "mail" and re.search(r"\b(?:sent|send|e-?mailed|reply|replied)\b", core, re.I):
        return Call(("mail", "list"), {"folder": "sent"})
    if kind == "mail" and re.search(r"\b(?:delete[d]?|trash(?:ed)?)\b", core, re.I):
        return Call(("mail", "list"), {"folder": "trash"})
    if kind == "tasks":
        return Call(("tasks", "list"), {"status": "all"})
    if kind == "reminders":
        return Call(("reminders", "list"), {"status": "all"})
    return _list_of(turn, kind, core)


_EVENT_NOUN: Final = re.compile(
    r"^(?:(?:a|an|my)\s+)?(?:lunch|dinner|breakfast|brunch|coffee|drinks|meeting|call|appointment|interview|party|session|sync|"
    r"review|standup|stand-up|1:1|one-on-one|catch[\s-]?up|date|class|lesson|workout|game|concert|flight|doctor|dentist)\b",
    re.I,
)


def _implicit_event(turn: Turn) -> bool:
    """"Coffee with Liam on thursday at 10": an event noun, a time, no verb and no question."""
    if turn.now is None or turn.tz is None or "?" in turn.text or _EVENT_NOUN.search(turn.text) is None:
        return False
    when = turn.when(turn.text)
    return when is not None and when.at is not None


def _special(turn: Turn) -> Plan | None:
    """Shapes with no opening verb: "X, add it to my list"; "I need to X by thursday" (a task
    with its due day, unless it names mail, events or reminders)."""
    return todo.add_it(turn) or (None if kinds_named(turn.text) else todo.obligation(turn))


@dataclass(frozen=True, slots=True)
class Routes:
    """What the bound functions offer beyond the grammar: their usage examples."""

    examples: tuple[Example, ...] = ()
    """Every usage example of every bound function."""
    known: frozenset[str] = frozenset()
    """The bound functions the grammar serves itself (it routes to those, not the examples)."""

    def best(self, text: str, *, only: Callable[[str], bool] | None = None) -> Match | None:
        """The nearest example among the functions the grammar does not serve (and ``only`` admits)."""
        pool = [e for e in self.examples if e.function not in self.known and (only is None or only(e.function))]
        return nearest(text, pool)

    def rivals(self, text: str, match: Match) -> bool:
        """Whether an example of a grammar-served function is at least as near as ``match``."""
        known = nearest(text, [e for e in self.examples if e.function in self.known])
        return known is not None and known.score >= match.score


_EXAMPLE_SCORE: Final = 0.5
"""The least weighted share of an example's words a request must have to be routed by it."""
_ANCHORED_SCORE: Final = 0.3
"""The same when the request names the tool itself ("note", "weather", "web")."""
_STRONG_SCORE: Final = 0.6
"""A plug-in example this near, with the request's verb, outweighs the grammar's catch-all write."""
_TIE: Final = 0.9
"""Another tool's example at least this share as near as the best one, opening alike, is a tie:
the request could be for either tool, so the picker asks which rather than choose."""


def _anchored(example: Example, text: str) -> bool:
    """Whether the request names the example's tool ("pantry", "expenses") or a value only its
    function takes (a choice of one of its required fields: "yoga" for a habit tracker)."""
    tool = example.function.split("__", 1)[0].lower()
    nouns = {tool, tool.rstrip("s")}
    if any(re.search(rf"\b{re.escape(n)}s?\b", text, re.I) for n in nouns if len(n) >= 3):
        return True
    schema = example.parameters
    props: Mapping[str, Any] = schema.get("properties") or {}
    choices = [v for name in schema.get("required") or () for v in (props.get(name) or {}).get("enum") or ()
               if isinstance(v, str) and len(v) >= 4]
    return any(re.search(rf"\b{re.escape(v.replace('_', ' '))}\b", text, re.I) for v in choices)


# Requests that open with a built-in's own command are the grammar's, whatever tool they mention
# ("remind me to log my expenses" is a reminder, not the expense log).
_GRAMMAR_COMMAND: Final = re.compile(r"^(?:remind|e-?mail|schedule|reply|forward|snooze)\b", re.I)


def _id_args(turn: Turn, match: Match) -> dict[str, Any] | Reply:
    """The matched function's id fields ("an id or position ... from the latest list"), resolved
    from the request's position ("#2", "the first one") or the one row of that tool's latest
    list whose title the request names; a question when there is none, or more than one."""
    schema = match.example.parameters
    props: Mapping[str, Any] = schema.get("properties") or {}
    rows = turn.recent.get(match.example.function.split("__", 1)[0]) or ()
    args: dict[str, Any] = {}
    asked = set(re.findall(r"\w+", turn.text.lower()))
    for name in schema.get("required") or ():
        if "position" not in str((props.get(name) or {}).get("description", "")):
            continue
        positions = find_positions(turn.text)
        if positions is not None and positions.mode == "items" and len(positions.items) == 1 and positions.items[0] > 0:
            args[name] = f"#{positions.items[0]}"
            continue
        hits = [r for r in rows if (title := re.findall(r"\w+", str(r.get("label", "")).split(" — ")[0].lower()))
                and set(title) <= asked]
        if len(hits) != 1:
            return clarify("Which one do you mean? Say its name or its number in the list." if hits or rows else
                           "Which one do you mean? Ask me to list them first, then say its number.")
        args[name] = str(hits[0]["id"])
    return args


def _direct(turn: Turn, match: Match | None) -> Plan | None:
    """The call ``match`` stands for, or a question naming what it still needs."""
    if match is None:
        return None
    given = _id_args(turn, match)
    if isinstance(given, Reply):
        return given
    schema = match.example.parameters
    tool = match.example.function.split("__", 1)[0]
    if not _several_slots(schema):
        args = fill(turn.text, match, given)
        if args is not None:
            # "add flour to the pantry": the clause naming the tool is the command, not the value.
            return Direct(match.example.function, {k: v if k in given or not isinstance(v, str) or "://" in v
                                                   else without_tool_clause(v, tool) or v for k, v in args.items()})
    slotted = fill_slots(turn.text, match.example.text, schema, given=given, when=turn.when, tool=tool)
    if isinstance(slotted, Missing):
        return clarify(f"{slotted.question()} For example: “{match.example.text}”.")
    return Direct(match.example.function, slotted)


def _several_slots(schema: Mapping[str, Any]) -> bool:
    """Whether a function has more to fill than one free text (several required fields, or any
    that is a number, a choice, a date, an address): the schema-driven filler's work."""
    props: Mapping[str, Any] = schema.get("properties") or {}
    if len(schema.get("required") or ()) > 1:
        return True
    for prop in props.values():
        options = [p for p in prop.get("anyOf") or () if p.get("type") != "null"] or [prop]
        if any(p.get("type") not in (None, "string") or p.get("enum") or p.get("format") in ("date", "date-time", "email")
               for p in options):
            return True
    return False


def _takes_url(example: Example) -> bool:
    props = example.parameters.get("properties") or {}
    return any(name == "url" or (p.get("format") == "uri") for name, p in props.items())


def _by_example(turn: Turn, routes: Routes, *, anchored_only: bool) -> Plan | None:
    match = None
    if re.search(r"https?://", turn.text):
        # A request with an address is for a function that takes one (save this link), when there is one.
        takers = {e.function for e in routes.examples if _takes_url(e)}
        match = routes.best(turn.text, only=takers.__contains__)
    if match is None and EMAIL.search(turn.text):
        # A request with an e-mail address is for a function that takes one (share it with ...).
        takers = {e.function for e in routes.examples if takes_email(e.parameters)}
        match = routes.best(turn.text, only=takers.__contains__) if takers else None
    if match is None:
        # A request that names a tool (or a value only it takes) is for that tool's functions.
        named = {e.function for e in routes.examples if _anchored(e, turn.text)}
        match = routes.best(turn.text, only=named.__contains__) if named else None
    match = match or routes.best(turn.text)
    if match is None:
        return None
    needs_url = "url" in (match.example.parameters.get("required") or ())
    if needs_url and "http" not in turn.text.lower():
        return None
    # Anchored: the request names the tool ("note", "weather"), or gives the address it reads.
    emailed = takes_email(match.example.parameters) and EMAIL.search(turn.text) is not None
    anchored = ((_anchored(match.example, turn.text) or needs_url or emailed) and not kinds_named(turn.text)
                and not _GRAMMAR_COMMAND.match(turn.text))
    if not anchored and routes.rivals(turn.text, match):
        return None
    if anchored and (match.score >= _ANCHORED_SCORE or (needs_url and match.same_verb)):
        return _direct(turn, match)
    # Unanchored, the request must open with the example's verb (or be very near it): an
    # unknown function may write, and a loose match must not propose another tool's write.
    if (not anchored_only and match.score >= _EXAMPLE_SCORE and (match.same_verb or match.score >= 0.75)
            and not kinds_named(turn.text)):  # a request naming mail, events, tasks or reminders is the grammar's
        return _tied(turn, routes, match) or _direct(turn, match)
    return None


def _tied(turn: Turn, routes: Routes, match: Match, *, floor: float = _EXAMPLE_SCORE) -> Reply | None:
    """A question naming both tools when another tool's example is as near as ``match``'s and
    opens alike ("add towels to the list" with a grocery list and a packing list): never a
    guess between two tools' writes."""
    tool = match.example.function.split("__", 1)[0]
    other = routes.best(turn.text, only=lambda name: name.split("__", 1)[0] != tool)
    if (other is None or other.same_verb != match.same_verb or other.fit < _TIE * match.fit
            or min(match.score, other.score) < floor):
        return None
    names = [_spoken(t) for t in (tool, other.example.function.split("__", 1)[0])]
    return clarify(f"Do you mean {names[0]} or {names[1]}? Say which, for example: “{match.example.text}” "
                   f"or “{other.example.text}”.")


def _spoken(tool: str) -> str:
    return "the " + tool.replace("_", " ")


_NOTE_LEAD: Final = re.compile(
    r"^(?:please\s+)?(?:(?:make|take|write|add|create|save)\s+(?:a\s+|me\s+a\s+)?note(?:\s+(?:that|saying|of))?"
    r"|note\s+to\s+self|note\s+(?:this|that)(?:\s+down)?|(?:jot|write|note)\s+(?:this\s+|it\s+)?down(?:\s+that)?"
    r"|(?:remember|keep\s+in\s+mind)\s+that)\s*[:,-]?\s*", re.I)
_TITLE_WORDS: Final = 8


def _note(turn: Turn, routes: Routes) -> Plan:
    """A request to write something down: the notes tool's write, or an honest no.

    A notes write with a title and a body (the built-in's shape) keeps everything the request
    says after its lead ("jot down that ...", "note to self:") as the body, and its first words
    as the title: the content is never cut to the part that differs from an example."""
    match = routes.best(turn.text, only=_is_notes)
    typed = turn.raw.strip()  # the note's words as typed, not as the request was normalised
    content = _NOTE_LEAD.sub("", typed, count=1).strip().rstrip(".!")
    writer = next((e for e in routes.examples if _is_notes(e.function) and _titled_body(e.parameters)), None)
    if writer is not None and content and content != typed.rstrip(".!"):
        words = content.split()
        title = " ".join(words[:_TITLE_WORDS]) + ("…" if len(words) > _TITLE_WORDS else "")
        return Direct(writer.function, {"title": title[:1].upper() + title[1:], "body": content})
    if match is not None and not any(k in match.example.function for k in ("list", "read", "archive")):
        return _direct(turn, match) or clarify("What should the note say?")
    return reply("I can't keep notes here. I can add it to your tasks or set a reminder if you like.")


def _is_notes(function: str) -> bool:
    return "note" in function.split("__", 1)[0].lower()


def _titled_body(schema: Mapping[str, Any]) -> bool:
    """Whether a function writes a note of a required title and a free body (the built-in's create)."""
    props: Mapping[str, Any] = schema.get("properties") or {}
    return list(schema.get("required") or ()) == ["title"] and "body" in props


_CLAUSES: Final = re.compile(r"\s*[,;]\s*(?:but\s+|and\s+|so\s+)?|\s+(?:but|so)\s+", re.I)
_STOP_REMINDING: Final = re.compile(
    r"^(?:(?:please\s+)?(?:don'?t|do\s+not|no\s+need\s+to)\s+remind\s+me|stop\s+reminding\s+me)\s+(?:to|about|of)\s+"
    r"(?P<what>.+?)\s+(?:any\s*more|again|from\s+now\s+on)[.!]*$", re.I)


def _scoped(text: str) -> str:
    """The clause a request asks for, when a negated or hedged clause comes before it.

    "Don't send anything yet, just show me my inbox" asks for the inbox: the negation is scoped
    to its own clause. "Please don't remind me to stretch any more" asks to cancel that reminder.
    Otherwise the whole request.
    """
    stop = _STOP_REMINDING.search(text)
    if stop is not None:
        return f"cancel the {stop.group('what')} reminder"
    text = re.sub(r"^forget(?:\s+about)?\s+(?=(?:the|my|that|this)\b)", "cancel ", text, flags=re.I)  # "forget the X reminder"
    clauses = [c for c in _CLAUSES.split(text) if c and c.strip()]
    if len(clauses) < 2:
        return text
    first, last = clauses[0], normalize(clauses[-1])
    # Only a negation is scoped so: "if it rains, cancel the dentist" stays one conditional request.
    negated = mood_of(first, opens_with_verb=head_verb(first) is not None)[0] == "negated" or re.search(
        r"\b(?:not|never|no)\b|n't\b", first, re.I)
    if re.match(r"(?:if|when|unless|once|in\s+case|whenever|should)\b", first, re.I):
        return text
    if not negated or head_verb(first) is not None and not re.match(r"(?:don'?t|do\s+not|never)\b", first, re.I):
        return text
    asks = head_verb(last) is not None or re.match(r"(?:show|list|check|see|view|give|tell|what|which|any)\b", last, re.I)
    return last if asks else text


_ADDRESS_ONLY: Final = re.compile(
    r"^(?:(?:it'?s|it\s+is|that'?s|use|to|send\s+it\s+to|their\s+address\s+is|the\s+address\s+is)\s+)?"
    r"(?P<address>[\w.+-]+@[\w-]+(?:\.[\w-]+)+)[.!]?$", re.I)


def _completion(turn: Turn, context: Mapping[str, Any] | None, routes: Routes) -> Plan | None:
    """The previous request completed by this one, when the picker asked it for a missing piece.

    "Remind me to call the bank" gets "When should I remind you?"; "tomorrow at 9am" then
    completes that request, and "it's jo@example.com" completes "email jo that ...". The
    previous request is decided again as it was (so only a request that was answered with a
    question is completed), then with the piece added; a call is kept, anything else is not.
    """
    if not turn.prior:
        return None
    previous = turn.prior[-1]
    address = _ADDRESS_ONLY.match(turn.text)
    if address is None and not _only_a_time(turn, turn.text):
        return None
    earlier = dict(context or {}) | {"prior_user_turns": list(turn.prior[:-1])}
    asked = decide(previous, earlier, routes)
    if not (isinstance(asked, Reply) and asked.outcome == "clarify"):
        return None
    if address is not None:
        named = re.match(r"^((?:e-?mail|mail|write|send|message)\s+)(?:to\s+)?(\w+)\b(?!@)", previous, re.I)
        combined = (previous[: named.start(2)] + address.group("address") + previous[named.end(2):] if named
                    else f"{previous} to {address.group('address')}")
    else:
        combined = f"{previous} {turn.text}"
    plan = decide(combined, earlier, routes)
    return plan if isinstance(plan, (Call, Direct)) else None


_NUMERIC_DATE: Final = re.compile(r"\b(?P<a>\d{1,2})/(?P<b>\d{1,2})(?:/\d{2,4})?\b|\b\d{1,2}\.\d{1,2}\.\d{2,4}\b")


def _unread_numeric_date(turn: Turn) -> Plan | None:
    """A question when the request has a numeric date no reading of which stands (12/11 with no
    locale to say which comes first, or a reading in the past): never a write on another day."""
    found = _NUMERIC_DATE.search(turn.text)
    if found is None:
        return None
    when = turn.when(turn.text)
    if when is not None and when.day_given and any(s <= found.start() < e for s, e in when.spans):
        return None
    if found.group("a") and found.group("b"):
        a, b = int(found.group("a")), int(found.group("b"))
        readings = [f"{d} {month_name[m]}" for d, m in ((a, b), (b, a)) if 1 <= m <= 12 and 1 <= d <= 31]
        if len(readings) == 2 and readings[0] != readings[1]:
            return clarify(f"Which day do you mean by {found.group(0)}: {readings[0]} or {readings[1]}? "
                           "(Setting your locale in your profile tells me how you write dates.)")
    return clarify(f"I couldn't place {found.group(0)} on a coming day. Which day do you mean, like “December 11”?")


def decide(request: str, context: Mapping[str, Any] | None, routes: Routes | None = None) -> Plan:
    """The offline picker's plan for ``request`` given the fenced ``context`` and what is bound."""
    routes = routes or Routes()
    turn = Turn.of(request, context)
    completed = _completion(turn, context, routes)
    if completed is not None:
        return completed
    turn = replace(turn, text=_scoped(resolve_references(turn)))
    chat = small_talk_reply(request)
    if chat is None and not re.search(r"\w", turn.text) and re.search(r"\w", request):
        chat = small_talk_reply("hi")  # only framing words ("hey tollgate!")
    if chat is not None:
        return reply(chat)
    if not re.search(r"\w", turn.text):
        return clarify("What would you like me to do?")
    if _CAPS.search(turn.text) or _CAPS.search(request.strip()):
        return reply(turn.capabilities or "I can help with your mail, calendar, tasks and reminders.")
    if is_standalone_no(turn.text):
        return reply("OK, I won't do anything.")
    if is_yes(turn.text):
        return reply(
            "If something is waiting for your approval, approve it on its approval card. "
            "Otherwise, tell me what you'd like me to do."
        )
    done = todo.finished_task(turn)  # "I booked the flights" with "Book flights" listed: before moods
    if done is not None:
        return done
    refused = out_of_scope(turn.text)
    if refused is not None:
        # "order a kettle" is out of the built-ins' scope, not of a shop plug-in's whose example
        # the request follows: the bound tools decide what is in scope.
        # An example that names its own tool ("turn off the standup trigger") must be named back.
        offered = routes.best(turn.text)
        if (offered is None or not offered.same_verb or offered.score < _STRONG_SCORE
                or (_anchored(offered.example, offered.example.text) and not _anchored(offered.example, turn.text))):
            return reply(refused)
        return _by_example(turn, routes, anchored_only=False) or reply(refused)
    unread = _unread_numeric_date(turn)
    if unread is not None:
        return unread
    rule = rules.mail_rule(turn)
    if rule is not None:
        return rule
    if NOTE_TAKING.search(turn.text):
        return _note(turn, routes)
    text = re.sub(r"^remind\s+(?:me|us)\s+(?=(?:what|when|where|who|which|how|if|whether)\b)", "", turn.text, flags=re.I)
    verb = head_verb(text) or verb_after_time(turn, text)
    mood, core = mood_of(text, opens_with_verb=verb is not None)
    if mood is not None:
        core = normalize(core)
        verb = head_verb(core)
        text = core
    if mood is None:
        routed = _by_example(turn, routes, anchored_only=True)
        if routed is not None:
            return routed
    plan = _special(replace(turn, text=text)) or _route(replace(turn, text=text), verb)
    if mood is None and isinstance(plan, Call) and plan.key == ("tasks", "create"):
        # The grammar's catch-all write ("log X" as a task) against a plug-in whose own example
        # the request all but repeats ("log 25 minutes of running"): the plug-in's.
        strong = routes.best(turn.text)
        if strong is not None and strong.score >= _STRONG_SCORE and strong.same_verb and not routes.rivals(turn.text, strong):
            return _direct(turn, strong) or plan
        # Nor does it choose when two plug-ins' examples fit alike and the request says no "task".
        if (strong is not None and strong.same_verb and not kinds_named(turn.text)
                and (tied := _tied(turn, routes, strong, floor=_ANCHORED_SCORE)) is not None):
            return tied
    if mood is None:
        if isinstance(plan, Reply) and plan.outcome == "clarify":
            return _by_example(turn, routes, anchored_only=False) or plan
        return plan
    if isinstance(plan, Call) and KNOWN[plan.key].writes:
        return _downgrade(turn, mood, core, plan)
    if isinstance(plan, Call):
        return plan  # a read stays a read, whatever the mood
    if mood == "past":
        return _past_read(replace(turn, text=core), core, verb) or plan
    return _mood_reply(mood)
