"""Mail requests: list, read, send, trash (never a hard delete) and mark as read."""

from __future__ import annotations

import re
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from tollgate.nodes.offline.plan import Call, Plan, Turn, clarify
from tollgate.nodes.offline.refs import find_count
from tollgate.nodes.offline.select import pick_ids
from tollgate.nodes.offline.text import clean_fragment
from tollgate.tools.args import EmailAddress

__all__ = ["is_send", "list_mail", "mark_read", "read_mail", "recipient_hint", "reply", "sender_of", "wrote_to_me", "send_mail", "trash_mail"]

_ADDRESS: Final = TypeAdapter(EmailAddress)
_ADDR_RE: Final = re.compile(r"(?<![\w.+'-])[\w.%+'-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+(?<![.-])")
_SEND_HEAD: Final = re.compile(
    r"^(?:send|e-?mail(?!s)|mail(?!s)|write|compose|draft|shoot|drop|message|tell|ask|inform|notify|let)\b(?!\s+(?:from|list|inbox)\b)",
    re.I,
)
_SEND_ANY: Final = re.compile(r"\b(?:send|e-?mail|write\s+to|message)\b", re.I)
_SUBJECT_RE: Final = re.compile(
    r"\b(?:with\s+(?:the\s+|a\s+)?)?(?:subject(?:\s+line)?|subj|titled|title[d]?)\s*(?:[:=-]|\bof\b|\bis\b)?\s*"
    r"(?P<q>\"[^\"]+\"|'[^']+'|.+?)"
    r"(?=\s*[,;.]?\s+(?:and\s+)?(?:body|saying|that\s+says|which\s+says|message|text|content|and\s+(?:say|tell|write))\b|\s*[,;]?\s*$)",
    re.I,
)
_BODY_RE: Final = re.compile(
    r"\b(?:saying|that\s+says|which\s+says|to\s+say|and\s+say|say(?=\s*:)|and\s+tell\s+(?:him|her|them)(?:\s+that)?"
    r"|telling\s+(?:him|her|them)(?:\s+that)?|body|message|text|content"
    r"|(?:and\s+)?let(?:ting)?\s+(?:him|her|them)\s+know(?:\s+that)?)\s*(?:[:=-]|\bis\b)?\s*(?P<b>.+)$",
    re.I,
)
_AFTER_ADDR_RE: Final = re.compile(
    r"@[\w.-]+\s*(?::\s*|\s+that\s+|\s+(?:know\s+)?that\s+|\s+know\s+)(?P<b>.+)$", re.I
)
_AFTER_COLON_RE: Final = re.compile(r"@[\w.-]+\b.*?:\s+(?P<b>.+)$")
_QUOTED_RE: Final = re.compile(r'"([^"]+)"|(?<!\w)\'(.+?)\'(?!\w)')
_ABOUT_RE: Final = re.compile(r"\b(?:about|regarding|re:?)\s+(?P<a>.+?)(?=\s*[,;.]|\s+(?:saying|that\s+says)\b|$)", re.I)
_NAME_RE: Final = re.compile(
    r"^(?:send\s+(?:an?\s+)?(?:e-?mail|message|note|mail)\s+to|e-?mail|mail|write\s+(?:an?\s+(?:e-?mail|note)\s+)?to|message|tell|ask|send)\s+"
    r"(?P<n>[A-Za-z][\w'-]*)",
    re.I,
)
_NOT_NAMES: Final = frozenset({"a", "an", "the", "me", "my", "him", "her", "them", "it", "this", "that", "email", "mail", "message", "to"})
_FROM_RE: Final = re.compile(
    r"\b(?:from|by|sent\s+by)\s+(?:(?:my|our|the)\s+)?(?P<w>[\w.+'-]+@[\w.-]+|[A-Za-z][\w'.-]*(?:\s+[A-Z][\w'-]*)?)", re.I
)
_TO_RE: Final = re.compile(r"\bto\s+(?P<w>[\w.+'-]+@[\w.-]+|[A-Z][\w'.-]*)")
_DID_WRITE_RE: Final = re.compile(
    r"^(?:did|has|have)\s+(?!(?:i|you|we|they|he|she|anyone|anybody|someone|somebody|it)\b)(?P<w>[\w.+'-]+@[\w.-]+|[A-Za-z][\w'-]*)\s+"
    r"(?:e-?mail(?:ed)?|written|wr[io]te|replied|reply|sent|send|messaged|gotten\s+back|got\s+back)\b",
    re.I,
)
_NOT_SENDERS: Final = frozenset(
    "today yesterday tomorrow this last the my earlier before recently week now home work anyone anybody someone "
    "everyone inbox trash".split()
)


def is_send(text: str) -> bool:
    """Whether ``text`` asks to send a message (a verb of sending at its head)."""
    if _SEND_HEAD.search(text) is None:
        return False
    head = text.split(maxsplit=1)[0].lower()
    if head in {"tell", "ask", "inform", "notify", "let"}:
        return _ADDR_RE.search(text) is not None
    if head in {"mail", "email", "e-mail"} and re.match(r"^\S+\s+(?:me|from|to\s+me)\b", text, re.I):
        return False
    return True


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1].strip()
    return text


def _body_keyword(text: str) -> re.Match[str] | None:
    """The first "saying ..." / "body ..." clause, never the opening verb ("message bob@x: hi")."""
    for match in _BODY_RE.finditer(text):
        if match.start() > 0 and not _ADDR_RE.match(match.group("b")):
            return match
    return None


def send_mail(turn: Turn) -> Plan:
    """``mail.send``: recipients, subject and body from the request, or a question."""
    text = turn.text
    addresses: list[str] = []
    for match in _ADDR_RE.finditer(text):
        address = match.group(0)
        try:
            _ADDRESS.validate_python(address)
        except ValidationError:
            return clarify(f"{address!r} doesn't look like a valid email address. Which address should I use?")
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        name = _NAME_RE.search(text)
        if name and name.group("n").lower() not in _NOT_NAMES:
            return clarify(f"What's {name.group('n')}'s email address?")
        return clarify("Who should I send it to? I need their email address.")
    subject_m = _SUBJECT_RE.search(text)
    body_m = _body_keyword(text) or _AFTER_ADDR_RE.search(text) or _AFTER_COLON_RE.search(text)
    body = ""
    if body_m is not None:
        end = subject_m.start() if subject_m is not None and subject_m.start() > body_m.start("b") else len(text)
        body = re.sub(r"[\s,;]+(?:and|with(?:\s+the)?)?\s*$", "", text[body_m.start("b") : end])
        body = _unquote(body.strip())
    if not body and (quoted := _QUOTED_RE.search(text)) is not None:
        body = (quoted.group(1) or quoted.group(2)).strip()
    subject = _unquote(subject_m.group("q")) if subject_m is not None else ""
    about = _ABOUT_RE.search(text[: body_m.start()] if body_m is not None else text)
    if not subject and about is not None:
        subject = clean_fragment(about.group("a"))
    if not body:
        return clarify(f"What should the email to {', '.join(addresses)} say?")
    if not subject:
        first = re.split(r"(?<=[.!?])\s", body, maxsplit=1)[0]
        words = first.split()
        subject = " ".join(words[:8]).rstrip(".,;:!?") + ("…" if len(words) > 8 else "")
    return Call(("mail", "send"), {"to": addresses, "subject": _cap(subject)[:200], "body": _cap(body)[:5000]})


def wrote_to_me(text: str) -> bool:
    """"Did Sam email me?", "has github sent anything?": a question about received mail."""
    return _DID_WRITE_RE.search(text) is not None


def recipient_hint(text: str) -> str | None:
    """Who a message was (or would be) sent to: an address, or a name after the verb."""
    address = _ADDR_RE.search(text)
    if address is not None:
        return address.group(0)
    name = _NAME_RE.search(text)
    if name and name.group("n").lower() not in _NOT_NAMES:
        return name.group("n")
    to = _TO_RE.search(text)
    return to.group("w") if to is not None else None


def _sender(text: str) -> str | None:
    did = _DID_WRITE_RE.search(text)
    if did is not None:
        return did.group("w")
    for match in _FROM_RE.finditer(text):
        word = match.group("w").rstrip(".?!,")
        first = word.split()[0].lower()
        if first not in _NOT_SENDERS:
            if len(word.split()) > 1 and word.split()[1].lower() in _NOT_SENDERS:
                word = word.split()[0]
            return word
    return None


def list_mail(turn: Turn, text: str | None = None) -> Plan:
    """``mail.list``: folder, unread filter, sender filter and count from the request."""
    text = turn.text if text is None else text
    args: dict[str, Any] = {}
    if re.search(r"\b(?:sent|outbox|outgoing|i\s+(?:sent|send|e-?mailed|wrote))\b", text, re.I):
        args["folder"] = "sent"
        to = _TO_RE.search(text)
        if to is not None:
            args["from_contains"] = to.group("w").rstrip(".?!,")
    elif re.search(r"\b(?:trash|bin|deleted|trashed)\b", text, re.I):
        args["folder"] = "trash"
    if re.search(r"\b(?:new|unread|unseen|haven't\s+read|not\s+read|fresh)\b", text, re.I) and args.get("folder") != "sent":
        args["unread_only"] = True
    if "from_contains" not in args:
        sender = _sender(text)
        if sender is not None:
            args["from_contains"] = sender[:100]
    count = find_count(text)
    if count is not None:
        args["limit"] = min(max(count, 1), 25)
    return Call(("mail", "list"), args)


def read_mail(turn: Turn, target: str) -> Plan:
    """``mail.read`` of one message from the latest list (or a filtered list when none is shown)."""
    if not turn.recent.get("mail"):
        sender = _sender(target)
        if sender is not None:
            return Call(("mail", "list"), {"from_contains": sender[:100]})
    picked = pick_ids(turn, "mail", target, bulk=False)
    if not isinstance(picked, list):
        return picked
    return Call(("mail", "read"), {"message_id": picked[0]})


def trash_mail(turn: Turn) -> Plan:
    """``mail.trash`` (soft, reversible) of messages from the latest list."""
    picked = pick_ids(turn, "mail", turn.text, bulk=True, by_day=True)
    if not isinstance(picked, list):
        return picked
    return Call(("mail", "trash"), {"message_ids": picked[:20]})


def mark_read(turn: Turn) -> Plan:
    """``mail.mark_read`` of messages from the latest list."""
    picked = pick_ids(turn, "mail", turn.text, bulk=True, by_day=True)
    if not isinstance(picked, list):
        return picked
    return Call(("mail", "mark_read"), {"message_ids": picked[:20]})


_REPLY: Final = re.compile(
    r"^(?:reply|respond|answer|write\s+back)\s+(?:to\s+)?(?P<who>[\w.'-]+?)(?:'s\s+(?:e-?mail|mail|message))?"
    r"(?:\s+(?:saying|that|with)\s+|\s*:\s*|\s*,\s*)(?P<body>.+)$", re.I)
_SENDER: Final = re.compile(
    r"^(?:(?P<name>[^<—]*)<(?P<address>[^>]+)>|(?P<bare>[\w.+-]+@[\w-]+(?:\.[\w-]+)+))\s*—\s*“(?P<subject>[^”]*)”")
"""A mail list row's sender ("Sam Lee <sam@example.com>", or the bare address) and subject."""


def reply(turn: Turn) -> Plan | None:
    """"Reply to sam saying friday works": a mail to the sender of the one message of the latest
    list that ``sam`` names, ``Re:`` its subject; a question when none or several do, ``None``
    when the request is not a reply with what to say."""
    found = _REPLY.search(turn.text)
    if found is None:
        bare = re.match(r"^(?:reply|respond|write\s+back)\s+to\s+(?P<who>[\w.'-]+)[.!?]*$", turn.text, re.I)
        return clarify(f"What should the reply to {bare.group('who')} say?") if bare else None
    who, body = found.group("who").lower(), found.group("body").strip().rstrip(".")
    typed = _REPLY.search(turn.raw.strip())
    if typed is not None and typed.group("who").lower() == who:
        body = typed.group("body").strip().rstrip(".")  # as typed: "friday works for me" keeps "for me"
    senders = _senders(turn, who)
    if len({_address(s) for s in senders}) != 1:
        return clarify(f"Which message should I reply to? I couldn't find one from {found.group('who')} in your latest "
                       "list; ask me to show your mail first." if not senders else
                       f"Which of {found.group('who')}'s messages should I reply to?")
    sender = senders[0]
    subject = sender.group("subject")
    subject = subject if subject.lower().startswith("re:") else f"Re: {subject}"
    return Call(("mail", "send"), {"to": [_address(sender)], "subject": subject[:200],
                                   "body": body[:1].upper() + body[1:]})


def _senders(turn: Turn, who: str) -> list[re.Match[str]]:
    """The latest mail list's rows whose sender ``who`` names (a name of theirs, or their address's start)."""
    who = who.lower()
    found = []
    for row in turn.recent.get("mail") or ():
        parsed = _SENDER.match(str(row.get("label", "")))
        if parsed and (who in (parsed.group("name") or "").lower().split() or _address(parsed).lower().startswith(who)):
            found.append(parsed)
    return found


def _address(sender: re.Match[str]) -> str:
    return sender.group("address") or sender.group("bare")


def sender_of(turn: Turn, who: str) -> list[str]:
    """The distinct addresses of the latest mail list's senders that ``who`` names."""
    return sorted({_address(m) for m in _senders(turn, who)})
