"""Trigger rules the way people ask for them: "let me know when Sam emails me", "when the bank
writes, add a task to check it".

A rule needs an exact sender: an address typed in the request, or the one sender of the latest
mail list the name matches. Otherwise the picker asks for the address, never a guess (a rule on
the wrong sender would act on someone else's mail).
"""

from __future__ import annotations

import re
from typing import Final

from tollgate.nodes.offline.mail import sender_of
from tollgate.nodes.offline.plan import Direct, Plan, Turn, clarify
from tollgate.nodes.offline.text import normalize

__all__ = ["mail_rule"]

_MAIL_RULE: Final = re.compile(
    r"^(?:(?P<tell>let\s+me\s+know|tell\s+me|notify\s+me|alert\s+me|ping\s+me)\s+(?:when|if|whenever|as\s+soon\s+as)"
    r"|when(?:ever)?|as\s+soon\s+as|if)\s+(?P<who>[\w.@+'-]+)\s+"
    r"(?:e-?mails?|mails?|writes?|replies|sends?\s+(?:me\s+)?(?:an?\s+)?(?:e-?mail|mail|message))(?:\s+(?:me|to\s+me|back))?"
    r"(?:\s*[,;:]\s*|\s+(?:then\s+)?)?(?P<then>.*?)[.!]*$", re.I)
_TELL: Final = "Tell me that it arrived and what it says."


def mail_rule(turn: Turn) -> Plan | None:
    """A rule firing on mail from the named sender, doing what the request says (or telling the
    owner); ``None`` when the request is not one."""
    # The request as typed (typos repaired), not with "it" resolved: in a rule, "it" is the mail to come.
    found = _MAIL_RULE.search(normalize(turn.raw))
    if found is None or (not found.group("tell") and not found.group("then").strip()):
        return None
    who = found.group("who").strip("'")
    if "@" in who:
        address = who
    else:
        senders = sender_of(turn, who)
        if len(senders) != 1:
            return clarify(f"What is {who}'s email address? I'll set up a rule for mail from it."
                           if not senders else f"Which {who} do you mean? Tell me their address.")
        address = senders[0]
    then = found.group("then").strip()
    instruction = _TELL if found.group("tell") and not then else then[:1].upper() + then[1:]
    return Direct("triggers__create", {"match": {"kind": "mail", "sender": address}, "instruction": instruction[:1000]})
