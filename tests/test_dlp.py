"""DLP: every format of the pack, the encodings that hide them, the text that must not match.

Fixture secrets are assembled at run time so this file itself holds no complete credential.
"""

from __future__ import annotations

import base64
import json
import time
from urllib.parse import quote

from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
import pytest

from tollgate.policies import _dlp_patterns
from tollgate.policies.dlp import BUILTIN_DETECTORS, DlpPolicy, DlpReport, scan_text, scan_values


def _b64url(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


AWS_KEY_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
GITHUB_CLASSIC = "ghp_" + "R2d2C3poBB8aa1bb2cc3dd4ee5ff6gg7hh8ii"
GITHUB_FINE = "github_pat_" + "11ABCDEFG0123456789abc_" + "x" * 30 + "Y9" * 15
SLACK = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
STRIPE = "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc"
STRIPE_RESTRICTED = "rk_" + "live_" + "51HxYzAbCdEfGhIjKlMnOpQr"
OPENAI_LEGACY = "sk-" + "Ab3dEf5hIj7lMn9pQr1tUv3xYz5bCd7fGh9jKl1nOp3rSt5v"
OPENAI_PROJECT = "sk-proj-" + "Ab3dEf5hIj7lMn9pQr1tUv3xYz5bCd7f_Gh9jKl1nOp3rSt5v-Wx7yZa9cEe1gIi3kMm5oQq"
ANTHROPIC = "sk-ant-" + "api03-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa_zyXWvutsrqpONMLkjih-gfedcbaZYX"
JWT = (
    _b64url({"alg": "HS256", "typ": "JWT"}) + "." + _b64url({"sub": "1234567890", "name": "Sam"}) + "."
    + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = "-----BEGIN " + "RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        pytest.param(f"key id {AWS_KEY_ID} ok", "aws_access_key_id", id="aws-access-key-id"),
        pytest.param("ASIA" + "Y34FZKBOKMUTVV7A", "aws_access_key_id", id="aws-temporary-key-id"),
        pytest.param(f"aws_secret_access_key = {AWS_SECRET}", "aws_secret_access_key", id="aws-secret-config"),
        pytest.param(f'"AWS Secret Key": "{AWS_SECRET}"', "aws_secret_access_key", id="aws-secret-json"),
        pytest.param(f"token {GITHUB_CLASSIC}", "github_token", id="github-classic-ghp"),
        pytest.param("gho_" + GITHUB_CLASSIC[4:], "github_token", id="github-oauth-gho"),
        pytest.param(GITHUB_FINE, "github_fine_grained_token", id="github-fine-grained"),
        pytest.param(SLACK, "slack_token", id="slack-bot-xoxb"),
        pytest.param("xoxp-" + SLACK[5:], "slack_token", id="slack-user-xoxp"),
        pytest.param("https://hooks.slack.com/services/" + "T0000/B0000/XXXXXXXXXXXXXXXXXXXXXXXX", "slack_webhook", id="slack-webhook"),
        pytest.param(STRIPE, "stripe_live_key", id="stripe-sk-live"),
        pytest.param(STRIPE_RESTRICTED, "stripe_live_key", id="stripe-rk-live"),
        pytest.param(OPENAI_LEGACY, "openai_api_key", id="openai-legacy"),
        pytest.param(OPENAI_PROJECT, "openai_api_key", id="openai-sk-proj"),
        pytest.param(ANTHROPIC, "anthropic_api_key", id="anthropic-sk-ant"),
        pytest.param(PEM, "private_key", id="pem-rsa"),
        pytest.param("-----BEGIN " + "OPENSSH PRIVATE KEY-----", "private_key", id="pem-openssh"),
        pytest.param("-----BEGIN " + "PRIVATE KEY-----", "private_key", id="pem-pkcs8"),
        pytest.param("-----BEGIN " + "ENCRYPTED PRIVATE KEY-----", "private_key", id="pem-encrypted"),
        pytest.param("-----BEGIN " + "PGP PRIVATE KEY BLOCK-----", "private_key", id="pgp-private-block"),
        pytest.param(f"Authorization: Bearer {JWT}", "jwt", id="jwt"),
        pytest.param("postgres://admin:" + "s3cr3t-pw@db.example.com/prod", "url_credentials", id="url-password"),
        pytest.param("https://bob:" + "hunter2@example.com/x", "url_credentials", id="https-password"),
        pytest.param("card 4111 1111 1111 1111 exp 12/29", "card_number", id="visa-spaced"),
        pytest.param("5555-5555-5555-4444", "card_number", id="mastercard-dashed"),
        pytest.param("378282246310005", "card_number", id="amex-plain"),
        pytest.param("6011111111111117", "card_number", id="discover"),
        pytest.param("Amex 3782 822463 10005", "card_number", id="amex-grouped-4-6-5"),
        pytest.param("Diners 3056 930902 5904", "card_number", id="diners-grouped-4-6-4"),
        pytest.param("4222 2222 2222 2", "card_number", id="visa-13-digits-grouped"),
        pytest.param("IBAN GB82 WEST 1234 5698 7654 32", "iban", id="iban-gb-spaced"),
        pytest.param("DE89370400440532013000", "iban", id="iban-de"),
        pytest.param("fr1420041010050500013m02606", "iban", id="iban-fr-lowercase"),
    ],
)
def test_each_format_is_found(text: str, kind: str) -> None:
    report = scan_text(text)
    assert kind in report.kinds, report


def test_anthropic_keys_are_not_reported_as_openai_keys() -> None:
    assert scan_text(ANTHROPIC).kinds == ("anthropic_api_key",)


def test_offsets_point_at_the_secret() -> None:
    text = f"prefix {AWS_KEY_ID} suffix"
    [finding] = scan_text(text).findings
    assert text[finding.start : finding.end] == AWS_KEY_ID
    assert finding.layer == "raw"


def _zero_width(secret: str) -> str:
    return "\u200b".join(secret)


@pytest.mark.parametrize(
    ("text", "kind", "layer"),
    [
        pytest.param(_zero_width(AWS_KEY_ID), "aws_access_key_id", "normalized", id="zero-width-spaces"),
        pytest.param("\ufeff".join(STRIPE), "stripe_live_key", "normalized", id="bom-characters"),
        pytest.param("\u2060".join(GITHUB_CLASSIC), "github_token", "normalized", id="word-joiners"),
        pytest.param("\u00ad".join(OPENAI_PROJECT), "openai_api_key", "normalized", id="soft-hyphens"),
        pytest.param("ＡＫＩＡ" + AWS_KEY_ID[4:], "aws_access_key_id", "normalized", id="fullwidth-letters"),
        pytest.param(base64.b64encode(f"key={AWS_KEY_ID}".encode()).decode(), "aws_access_key_id", "base64", id="base64"),
        pytest.param(base64.urlsafe_b64encode(STRIPE.encode()).decode(), "stripe_live_key", "base64", id="base64url"),
        pytest.param("x=" + GITHUB_CLASSIC.encode().hex(), "github_token", "hex", id="hex"),
        pytest.param(quote(f"https://x.example/?k={AWS_KEY_ID}", safe="") .replace("A", "%41"), "aws_access_key_id", "percent", id="percent-encoded"),
        pytest.param("".join(f"\\u{ord(c):04x}" for c in SLACK), "slack_token", "escape", id="unicode-escapes"),
        pytest.param("".join(f"\\x{ord(c):02x}" for c in STRIPE), "stripe_live_key", "escape", id="hex-escapes"),
        pytest.param("".join(f"&#{ord(c)};" for c in AWS_KEY_ID), "aws_access_key_id", "html_entity", id="html-entities"),
        pytest.param(base64.b64encode(quote(ANTHROPIC, safe="").replace("-", "%2D").encode()).decode(), "anthropic_api_key", "percent", id="percent-inside-base64"),
        pytest.param(base64.b64encode(base64.b64encode(f"k {AWS_KEY_ID}".encode())).decode(), "aws_access_key_id", "base64", id="double-base64"),
        pytest.param(base64.b64encode(_zero_width(AWS_KEY_ID).encode()).decode(), "aws_access_key_id", "base64", id="zero-width-inside-base64"),
    ],
)
def test_evasions_are_decoded(text: str, kind: str, layer: str) -> None:
    report = scan_text(text)
    assert kind in report.kinds, report
    assert any(f.kind == kind and f.layer == layer for f in report.findings), report.findings


def test_decoding_depth_is_bounded() -> None:
    thrice = f"k {AWS_KEY_ID}".encode()
    for _ in range(3):
        thrice = base64.b64encode(thrice)
    assert scan_text(thrice.decode(), DlpPolicy(max_depth=2)).clean
    assert not scan_text(thrice.decode(), DlpPolicy(max_depth=3)).clean


def _luhn_tail(prefix: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(prefix + "0")):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d * 2 > 9 else d * 2
        total += d
    return prefix + str((10 - total % 10) % 10)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("Hi Sam, still on for lunch at 12:30 tomorrow? The new place near the office looks great.", id="prose"),
        pytest.param("Your order #100234567890123 has shipped. Invoice INV-2026-000123 is attached.", id="order-numbers"),
        pytest.param(f"Order {_luhn_tail('100000000000000')} confirmed", id="luhn-valid-order-number"),
        pytest.param(f"Tracking {_luhn_tail('99123456789012345')}", id="luhn-valid-tracking-number"),
        pytest.param("Ticket 550e8400-e29b-41d4-a716-446655440000 was closed", id="uuid"),
        # A random thread id whose first groups are all digits and pass Luhn (about one in 10,000
        # UUIDs): read as a Visa number, it failed the audit write of the turn that used it.
        pytest.param("thread 48007391-3832-4972-abe5-62bce7517d36", id="uuid-with-card-like-digits"),
        pytest.param("Fixed in da39a3ee5e6b4b0d3255bfef95601890afd80709 (short: da39a3e)", id="git-sha"),
        pytest.param("sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", id="sha256-digest"),
        pytest.param("Call +33 1 42 68 53 00 or 555-0100 before 2026-12-01T09:00:00Z", id="phone-and-dates"),
        pytest.param("Total: EUR 1,234.56 for 12 items; ref 4111", id="prices-and-short-numbers"),
        pytest.param("We use sk-learn and scikit-learn for models; the AKIA prefix marks AWS keys.", id="mentions-of-prefixes"),
        pytest.param("See https://user@example.com/docs and https://example.com/a:b@c", id="urls-without-passwords"),
        pytest.param("-----BEGIN CERTIFICATE----- and -----BEGIN PUBLIC KEY-----", id="public-pem-blocks"),
        pytest.param("The IBAN format starts with a country code, like GB or DE, then two check digits.", id="talking-about-ibans"),
        pytest.param("GB82 WEST 1234 5698 7654 33", id="iban-bad-checksum"),
        pytest.param("4111 1111 1111 1112", id="card-bad-luhn"),
        pytest.param("eyJhbGciOiJub25lIn0 is just a header", id="lone-jwt-header"),
        pytest.param("1Z999AA10123456784 and 9400111899223197428490", id="parcel-numbers"),
        pytest.param("The quick brown fox jumps over the lazy dog. " * 40, id="long-prose"),
        pytest.param(base64.b64encode(bytes(range(256))).decode(), id="base64-binary"),
        pytest.param("a" * 40 + " " + "A" * 40 + " secret_access_key: " + "b" * 40, id="not-mixed-enough-for-aws-secret"),
    ],
)
def test_ordinary_text_does_not_match(text: str) -> None:
    report = scan_text(text)
    assert report.clean, report


def test_values_are_walked_with_field_paths() -> None:
    report = scan_values({"to": ["a@example.com", "b@example.com"], "subject": "hi", "body": f"key {AWS_KEY_ID}"})
    assert report.kinds == ("aws_access_key_id",) and report.fields == ("body",)
    report = scan_values({"to": [f"{STRIPE}@evil.example"], "body": "x"})
    assert report.fields == ("to[0]",)


def test_reports_and_warnings_never_carry_the_secret() -> None:
    report = scan_values({"body": f"{AWS_KEY_ID} {STRIPE} {JWT}"})
    assert not report.clean
    for text in (report.warning(), repr(report), str(report.findings)):
        assert AWS_KEY_ID not in text and STRIPE not in text and JWT not in text
    assert "AWS access key id" in report.warning() and "(in body)" in report.warning()


@pytest.mark.parametrize(
    ("value", "failure"),
    [
        pytest.param("x" * 200_001, "oversize", id="oversize-string"),
        pytest.param({"a": "x" * 150_000, "b": "y" * 60_000}, "oversize", id="oversize-total"),
        pytest.param(" ".join([base64.b64encode(b"hello world, hi!").decode()] * 5000), "scan_limit", id="too-many-encoded-runs"),
    ],
)
def test_limits_fail_closed(value: object, failure: str) -> None:
    report = scan_values(value)
    assert not report.clean and report.failure == failure


def test_a_scanner_fault_fails_closed() -> None:
    class Hostile(str):
        def __iter__(self):  # type: ignore[no-untyped-def]
            raise RuntimeError("boom")

    report = scan_values({"body": Hostile("text")})
    assert report.failure == "scanner_error" and not report.clean
    assert scan_text(b"bytes are not text").failure == "scanner_error"  # type: ignore[arg-type]


def test_patterns_are_linear_time_by_construction() -> None:
    """Every detector is an RE2 program: RE2 refuses back-references and look-around and never backtracks."""
    import re2

    for rule in _dlp_patterns.RULES:
        assert isinstance(_dlp_patterns.compile_rule(rule), re2._Regexp), rule.kind
    assert set(BUILTIN_DETECTORS) == {r.kind for r in _dlp_patterns.RULES}


_PATHOLOGICAL = {
    "same-letter": "a" * 1_000_000,
    "repeated-prefix": "AKIA" * 250_000,
    "digits-and-separators": "4" + " 4" * 500_000,
    "jwt-like-runs": ("eyJ" + "a" * 20 + ".") * 40_000,
    "url-userinfo-runs": "http://" + "a:" * 500_000,
    "pem-openers": "-----BEGIN " * 90_000,
    "percent-escapes": "%41" * 333_333,
    "base64-run": "QUFB" * 250_000,
    "hex-run": "41" * 500_000,
    "iban-like": "GB82 " * 200_000,
    "dash-run": "sk-" + "-" * 1_000_000,
}


@pytest.mark.parametrize("name", list(_PATHOLOGICAL))
def test_a_megabyte_of_pathological_input_scans_quickly(name: str) -> None:
    """ReDoS: 1 MB of adversarial input. The bound is deliberately generous (RE2 is linear)."""
    started = time.monotonic()
    report: DlpReport = scan_text(_PATHOLOGICAL[name], DlpPolicy(max_chars=2_000_000))
    assert time.monotonic() - started < 10.0
    assert report.failure is None


@given(st.text(alphabet="0123456789abcdefABCDEF-_+/= %&\\xu;#\n", max_size=80))
@hyp_settings(max_examples=300, deadline=None)
def test_the_hex_view_is_only_skipped_where_it_could_not_match(text: str) -> None:
    """The scanner looks for hex runs only where it found a base64-alphabet run: never a miss."""
    from tollgate.policies.dlp import _BASE64, _HEX

    if _HEX.search(text):
        assert _BASE64.search(text)


def test_a_secret_split_across_two_arguments_is_found_in_their_concatenation() -> None:
    split = {"subject": "AKIA", "body": "IOSFODNN7EXAMPLE"}
    assert scan_text("AKIA").clean and scan_text("IOSFODNN7EXAMPLE").clean  # each half alone is nothing
    report = scan_values(split)
    assert "aws_access_key_id" in report.kinds and report.fields == ("(joined)",)
    assert scan_values({"subject": "Lunch", "body": "See you at 12:30."}).clean


def test_a_secret_in_three_pieces_over_three_calls_is_found_across_the_turns_window() -> None:
    from tollgate.policies.dlp import scan_across

    key = "AKIA" + "IOSFODNN7EXAMPLE"
    first, second, third = key[:4], key[4:10], key[10:]
    assert scan_across([], {"query": first}).clean
    assert scan_across([first], {"query": second}).clean  # nothing yet: two pieces of three
    found = scan_across([first, second], {"query": third})
    assert "aws_access_key_id" in found.kinds
    assert scan_across(["unrelated", "words"], {"query": "more words"}).clean
