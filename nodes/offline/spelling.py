"""Typo repair by edit distance over the picker's vocabulary, not a list of known misspellings.

A word the vocabulary does not know is replaced by the one vocabulary word a single edit away
(a swapped pair, a missing, extra or wrong letter): "emials" -> "emails", "remnid" -> "remind",
"delte" -> "delete", "wether" -> "weather". Short words are where real words collide ("bank" is
one letter from "back"), so a four-letter word is only repaired by a swap or a missing letter,
and shorter ones never; a word with two candidates is left as it is. The vocabulary is the
grammar's own command, kind and time words.

Hand-written rather than a fuzzy-matching library: the rule is "exactly one word at distance
one, with these length limits", a dozen lines that a library's scorer would still need around it.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["GRAMMAR_WORDS", "repair"]

GRAMMAR_WORDS: Final = frozenset("""
email emails mail mails inbox message messages unread calendar schedule event events meeting meetings appointment
appointments reminder reminders remind task tasks todo note notes delete cancel trash archive snooze complete
finish finished tomorrow today tonight yesterday week weekend morning afternoon evening monday tuesday wednesday
thursday friday saturday sunday january february march april june july august september october november december
weather forecast search show list check open mark send reschedule postpone minutes hours please upcoming agenda
anything everything minute hour day
""".split())
"""The words the grammar routes on, whose misspellings are worth repairing."""

_REAL: Final = frozenset("even ever vent mall main sand tank lost mist week weeks news shows lists marks spend spent "
                         "lend tend".split())
"""Real words one edit from a vocabulary word, never "repaired"."""

_WORD: Final = re.compile(r"(?<![\w@./:-])([a-z]{4,}|2[a-z]{3,})(?![\w@/:-])", re.I)


def _one_edit(word: str, known: str) -> bool:
    """Whether ``word`` is one edit from ``known``, within the length limits above."""
    if word == known or abs(len(word) - len(known)) > 1:
        return False
    if len(word) == len(known):
        diffs = [i for i, (a, b) in enumerate(zip(word, known, strict=True)) if a != b]
        swap = len(diffs) == 2 and diffs[1] == diffs[0] + 1 and word[diffs[0]] == known[diffs[1]] \
            and word[diffs[1]] == known[diffs[0]]
        return swap or (len(diffs) == 1 and len(word) >= 5)
    shorter, longer = (word, known) if len(word) < len(known) else (known, word)
    if len(word) == 4 and word is not shorter:
        return False  # a four-letter word with an extra letter is usually a word of its own
    if len(word) < 4 or (len(word) == 4 and len(known) > 5):
        return False
    return any(longer[:i] + longer[i + 1:] == shorter for i in range(len(longer)))


def _candidate(word: str, vocabulary: frozenset[str]) -> str | None:
    lowered = word.lower()
    if lowered in vocabulary or lowered in _REAL:
        return None
    if lowered.startswith("2") and "to" + lowered[1:] in vocabulary:  # "2day", "2morrow"
        return "to" + lowered[1:]
    found = [known for known in vocabulary if _one_edit(lowered, known)]
    return found[0] if len(found) == 1 else None


def repair(text: str) -> str:
    """``text`` with each unknown word one edit from exactly one vocabulary word replaced by it."""

    def fix(match: re.Match[str]) -> str:
        return _candidate(match.group(1), GRAMMAR_WORDS) or match.group(1)

    return _WORD.sub(fix, text)
