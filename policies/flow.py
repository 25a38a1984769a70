"""Information flow: does a call that sends text outside carry what the model was shown?

An outbound call (a search query, a URL to fetch, a weather location, any argument of a tool
whose effect leaves Tollgate) is judged by what its values may derive from, computed from what
the thread read (:class:`policies.provenance.Shown`) and never taken from the model:

* a value **carries shown data** when it shares a span of :data:`SPAN_WORDS` consecutive words
  (after NFKC, case folding and dropping punctuation) with a text the thread read, and that span
  is not also in the person's own words;
* a value **carries contact data** when it holds an e-mail address or a phone number the person
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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from tollgate.policies.provenance import EMAIL, SPAN_WORDS, Shown, words

__all__ = ["Carried", "FlowMode", "carried"]

FlowMode = Literal["off", "approve", "refuse"]
"""What an outbound call that carries shown or contact data gets: nothing, an approval, a refusal."""

# A phone number: international (+ and 8-15 digits) or grouped by spaces or dashes; never a
# dotted address, a date (2026-12-01) or a bare run of digits (an id, an amount).
_PHONE: Final = re.compile(
    r"(?<![\w+.:/-])(?:\+\d[\d ()-]{6,18}\d|\(?\d{2,4}\)?[ -]\d{2,4}[ -]\d{2,4}(?:[ -]\d{2,4}){0,3})(?![\w.:/-])")
_DATE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _contacts(text: str) -> set[str]:
    """E-mail addresses (as provenance tokens, ``@…``) and phone numbers (``#digits``) in ``text``."""
    found = {"@" + m.group().casefold() for m in EMAIL.finditer(text)}
    for match in _PHONE.finditer(text):
        digits = re.sub(r"\D", "", match.group())
        if 8 <= len(digits) <= 15 and not _DATE.match(match.group()):
            found.add("#" + digits)
    return found


@dataclass(frozen=True, slots=True)
class Carried:
    """What an outbound call carries, by kind, and from where."""

    sources: tuple[str, ...] = ()
    """The sources whose text it copies, as a card names them, sorted."""
    contacts: bool = False
    """It holds an e-mail address or phone number the person did not type."""

    @property
    def clean(self) -> bool:
        """Nothing but the person's words and what is neither shown nor contact data."""
        return not self.sources and not self.contacts


def carried(values: Iterable[str], shown: Shown, earlier: Iterable[str] = ()) -> Carried:
    """What ``values`` (an outbound call's strings) carry, judged together with the ``earlier``
    outbound values of the turn (a span that straddles two calls counts)."""
    mine = list(values)
    before = [w for text in earlier for w in words(text)][-(SPAN_WORDS - 1):]
    joined = before + [w for text in mine for w in words(text)]
    # Only spans that reach into this call's words: what already went out was judged then.
    spans = {" ".join(joined[i : i + SPAN_WORDS]) for i in range(len(joined) - SPAN_WORDS + 1)}
    sources = {str(m.source) for span in spans if span not in shown.user_tokens for m in shown.where(span)}
    contacts = any(c not in shown.user_tokens for text in mine for c in _contacts(text))
    return Carried(tuple(sorted(sources)), contacts)
