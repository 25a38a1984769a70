"""Tollgate's own DLP pattern pack: one rule per credential or identifier format.

Every pattern is compiled with RE2, which matches in time linear in the input (no
backtracking), so no input can make a scan slow. Formats whose shape alone is too common
carry a validator (Luhn for cards, ISO 13616 mod-97 for IBANs, a JSON header for JWTs,
character mix for AWS secrets) that keeps ordinary numbers and words from matching.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import re2
from stdnum import iban as _iban
from stdnum import luhn as _luhn

__all__ = ["PatternRule", "RULES", "compile_rule"]


@dataclass(frozen=True, slots=True)
class PatternRule:
    """One detector, as data."""

    kind: str
    """Stable finding kind (``aws_access_key_id``...)."""
    label: str
    """What a person reads in a warning ("an AWS access key id")."""
    pattern: str
    """RE2 syntax; no look-around or back-references (RE2 has none)."""
    group: int = 0
    """The capture group that is the secret itself (0: the whole match)."""
    validate: Callable[[str], bool] | None = None
    """Extra check on the matched text; a match that fails it is not a finding."""


_CARD_GROUPS: Final = ((4, 6, 4), (4, 6, 5))
"""How a card's digits are grouped when they are not fours (Diners Club's 14, American Express's 15)."""


def _card_grouping(text: str) -> bool:
    """Whether ``text``'s separators group its digits as a card's are printed: none at all, fours
    (the last group shorter: 13 and 19 digits), or 4-6-4 and 4-6-5. Not a UUID's 8-4-4, which
    an identifier of all digits in those groups would otherwise read as."""
    groups = tuple(len(g) for g in text.replace(" ", "-").split("-"))
    return len(groups) == 1 or groups in _CARD_GROUPS or (
        all(g == 4 for g in groups[:-1]) and 1 <= groups[-1] <= 4)


def _card(text: str) -> bool:
    digits = "".join(ch for ch in text if ch.isdigit())
    seps = {ch for ch in text if not ch.isdigit()}
    if len(seps) > 1 or not 13 <= len(digits) <= 19 or len(set(digits)) == 1 or not _card_grouping(text):
        return False
    # Issuer prefixes (ISO/IEC 7812 IINs) of the major networks; an order number that happens to
    # pass Luhn (one in ten do) rarely starts like a card as well.
    two, four = int(digits[:2]), int(digits[:4])
    issuer = (
        digits[0] == "4"  # Visa
        or 51 <= two <= 55 or 2221 <= four <= 2720  # Mastercard
        or two in (34, 37)  # American Express
        or digits.startswith(("6011", "65")) or 644 <= int(digits[:3]) <= 649  # Discover
        or two == 35  # JCB
        or two in (36, 38, 39) or 300 <= int(digits[:3]) <= 305  # Diners Club
        or two == 62  # UnionPay
    )
    return issuer and _luhn.is_valid(digits)


def _iban_ok(text: str) -> bool:
    return bool(_iban.is_valid(text))


def _b64url_json(segment: str) -> Any:
    padded = segment + "=" * (-len(segment) % 4)
    return json.loads(base64.urlsafe_b64decode(padded))


def _jwt(text: str) -> bool:
    try:
        header = _b64url_json(text.split(".", 1)[0])
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return False
    return isinstance(header, dict) and ("alg" in header or "typ" in header)


def _mixed_secret(text: str) -> bool:
    return any(c.isupper() for c in text) and any(c.islower() for c in text) and any(c.isdigit() or c in "/+" for c in text)


def _openai(text: str) -> bool:
    return not text.startswith("sk-ant-") and any(c.isdigit() for c in text) and any(c.isalpha() for c in text[3:])


RULES: Final[tuple[PatternRule, ...]] = (
    PatternRule("aws_access_key_id", "an AWS access key id", r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z2-7]{16}\b"),
    PatternRule(
        "aws_secret_access_key",
        "an AWS secret access key",
        r"(?i)(?:aws[\w .-]{0,24}?(?:secret|private)[\w .-]{0,24}?|secret_?access_?key\s*)[\"']?\s*(?:[:=]|=>)\s*[\"']?"
        r"([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)",
        group=1,
        validate=_mixed_secret,
    ),
    PatternRule("github_token", "a GitHub token", r"\bgh[pousr]_[A-Za-z0-9]{36,255}\b"),
    PatternRule("github_fine_grained_token", "a GitHub fine-grained token", r"\bgithub_pat_[A-Za-z0-9_]{40,255}"),
    PatternRule("slack_token", "a Slack token", r"\b(?:xox[abposre]-[A-Za-z0-9-]{10,250}|xapp-[0-9]-[A-Za-z0-9-]{10,250})"),
    PatternRule(
        "slack_webhook", "a Slack webhook URL", r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]{20,}"
    ),
    PatternRule("stripe_live_key", "a Stripe live key", r"\b(?:sk|rk)_live_[A-Za-z0-9]{20,247}\b"),
    PatternRule("anthropic_api_key", "an Anthropic API key", r"\bsk-ant-[A-Za-z0-9_-]{32,}"),
    PatternRule(
        "openai_api_key", "an OpenAI API key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{32,}", validate=_openai
    ),
    PatternRule("private_key", "a private key", r"-----BEGIN (?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?-----"),
    PatternRule("jwt", "a JSON web token", r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}", validate=_jwt),
    PatternRule(
        "url_credentials",
        "a password inside a URL",
        r"\b[A-Za-z][A-Za-z0-9+.-]{1,15}://[^\s:/?#@]{1,128}:[^\s/?#@]{1,256}@[A-Za-z0-9\[]",
    ),
    PatternRule("card_number", "a payment card number", r"\b(?:[0-9][ -]?){12,18}[0-9]\b", validate=_card),
    PatternRule("iban", "a bank account number (IBAN)", r"(?i)\b[a-z]{2}[0-9]{2}(?: ?[a-z0-9]){11,30}\b", validate=_iban_ok),
)
"""The pack, in a stable order."""


def compile_rule(rule: PatternRule) -> Any:
    """The rule's RE2 program (raises ``re2.error`` for syntax RE2 cannot run in linear time)."""
    return re2.compile(rule.pattern)
