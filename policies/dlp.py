"""Data loss prevention: find credentials and payment data in values that leave Tollgate.

Detectors are pure ``text -> matches`` functions (with offsets) in :data:`BUILTIN_DETECTORS`,
built from the RE2 pattern pack in :mod:`policies._dlp_patterns`, so scanning is linear in the
input. Before matching, the text is also looked at through bounded decodings — zero-width and
other format characters stripped and NFKC-folded, percent escapes, ``\\u``/``\\x`` escapes,
HTML entities, base64 and hex runs — to a fixed depth, so an encoded secret is still a secret.

Fail closed: input over the size limit, a decoding that exceeds its bounds, or any scanner
error yields a report that is not clean. Reports carry kinds, field names and offsets, never
the matched text.
"""

from __future__ import annotations

import base64
import binascii
import functools
import html
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import unquote

import re2

from tollgate.policies._dlp_patterns import RULES, PatternRule, compile_rule

__all__ = [
    "BUILTIN_DETECTORS",
    "ACROSS_WINDOW",
    "scan_across",
    "string_fields",
    "strings_in",
    "DEFAULT_DLP",
    "DetectorMatch",
    "Detector",
    "DlpPolicy",
    "DlpReport",
    "Finding",
    "JOINED",
    "KIND_LABELS",
    "Layer",
    "scan_text",
    "scan_values",
]

Layer = Literal["raw", "normalized", "percent", "escape", "html_entity", "base64", "hex"]
"""Which view of the text a finding was made in."""

Failure = Literal["oversize", "scan_limit", "scanner_error"]
"""Why a scan could not vouch for its input (each counts as a finding)."""


@dataclass(frozen=True, slots=True)
class DetectorMatch:
    """One match of one detector."""

    kind: str
    """The detector's kind."""
    start: int
    """Offset of the first character, in the scanned text."""
    end: int
    """Offset after the last character."""


Detector = Callable[[str], list[DetectorMatch]]
"""A pure function from text to its matches."""


def _detector(rule: PatternRule) -> Detector:
    program = compile_rule(rule)

    def detect(text: str) -> list[DetectorMatch]:
        out: list[DetectorMatch] = []
        for match in program.finditer(text):
            start, end = match.start(rule.group), match.end(rule.group)
            if start < 0:
                continue
            if rule.validate is None or rule.validate(text[start:end]):
                out.append(DetectorMatch(rule.kind, start, end))
        return out

    detect.__doc__ = f"Find {rule.label} in text."
    return detect


BUILTIN_DETECTORS: Final[dict[str, Detector]] = {rule.kind: _detector(rule) for rule in RULES}
"""Every built-in detector by kind."""

KIND_LABELS: Final[dict[str, str]] = {rule.kind: rule.label for rule in RULES} | {
    "oversize": "a value too large to scan",
    "scan_limit": "more encoded content than the scanner will unpack",
    "scanner_error": "content the scanner could not read",
}
"""What a person reads for each kind."""

_PERCENT: Final = re2.compile(r"%[0-9A-Fa-f]{2}")
_ESCAPE: Final = re2.compile(r"\\(?:u[0-9A-Fa-f]{4}|x[0-9A-Fa-f]{2}|U[0-9A-Fa-f]{8})")
_ENTITY: Final = re2.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z]{2,10});")
_BASE64: Final = re2.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
_HEX: Final = re2.compile(r"(?:[0-9A-Fa-f]{2}){12,}")


@dataclass(frozen=True, slots=True)
class DlpPolicy:
    """Limits and detectors of a scan."""

    max_chars: int = 200_000
    """Largest total input (characters over all values); more fails closed."""
    max_depth: int = 2
    """How many decodings may be stacked (base64 of percent-encoding is depth 2)."""
    max_layers: int = 4096
    """Most decoded views one scan will look at; more fails closed."""
    detectors: tuple[str, ...] = tuple(BUILTIN_DETECTORS)
    """Which detectors run."""

    def __post_init__(self) -> None:
        unknown = [d for d in self.detectors if d not in BUILTIN_DETECTORS]
        if unknown:
            raise ValueError(f"unknown DLP detector(s): {unknown!r}")
        if not 0 <= self.max_depth <= 4 or self.max_chars < 1 or self.max_layers < 1:
            raise ValueError("DLP limits must be positive (depth 0-4)")


DEFAULT_DLP: Final = DlpPolicy()
"""The default scan policy."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing found: its kind, where (field, decoding layer, offsets), never its text."""

    kind: str
    """Detector kind, or a failure kind (``oversize``, ``scan_limit``, ``scanner_error``)."""
    field: str = ""
    """The argument path (``body``, ``to[1]``)."""
    layer: Layer = "raw"
    """The view of the value it was found in."""
    start: int = 0
    """Offset in that view."""
    end: int = 0
    """End offset in that view."""


@dataclass(frozen=True, slots=True)
class DlpReport:
    """The outcome of a scan."""

    findings: tuple[Finding, ...] = ()
    """What was found, in scan order."""
    failure: Failure | None = None
    """Set when the scan could not vouch for its input (fail closed)."""

    @property
    def clean(self) -> bool:
        """No finding and no failure."""
        return not self.findings and self.failure is None

    @property
    def kinds(self) -> tuple[str, ...]:
        """Distinct kinds found (failures included), sorted."""
        kinds = {f.kind for f in self.findings}
        if self.failure is not None:
            kinds.add(self.failure)
        return tuple(sorted(kinds))

    @property
    def fields(self) -> tuple[str, ...]:
        """Distinct fields with findings, sorted."""
        return tuple(sorted({f.field for f in self.findings if f.field}))

    def warning(self) -> str:
        """One sentence for an approval preview: kinds and fields, never values."""
        if self.clean:
            return ""
        what = ", ".join(KIND_LABELS.get(k, k) for k in self.kinds)
        where = f" (in {', '.join(self.fields)})" if self.fields else ""
        return f"⚠ Data-loss warning: this contains what looks like {what}{where}. Approve only if you mean to send it."

    def __repr__(self) -> str:
        return f"DlpReport(kinds={self.kinds!r}, fields={self.fields!r}, failure={self.failure!r})"


class _ScanLimit(Exception):
    pass


def _normalized(text: str) -> str:
    if type(text) is str and text.isascii():  # no ASCII character is a format character; NFKC keeps ASCII
        return text
    stripped = "".join(ch for ch in text if unicodedata.category(ch) != "Cf" and not 0xFE00 <= ord(ch) <= 0xFE0F)
    return unicodedata.normalize("NFKC", stripped)


def _printable(raw: bytes) -> str | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text:
        return None
    good = sum(1 for ch in text if ch.isprintable() or ch in "\n\r\t" or unicodedata.category(ch) == "Cf")
    return text if good >= 0.9 * len(text) else None


def _b64(token: str) -> str | None:
    body = token.rstrip("=")
    if len(body) % 4 == 1:
        return None
    padded = body + "=" * (-len(body) % 4)
    try:
        if "-" in body or "_" in body:
            raw = base64.urlsafe_b64decode(padded)
        else:
            raw = base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return None
    return _printable(raw)


def _escapes(match: str) -> str:
    try:
        return chr(int(match[2:], 16))
    except ValueError:
        return match


def _views(text: str) -> Iterator[tuple[Layer, str]]:
    """Decoded views of ``text`` one level down (each is strictly derived from the input).

    The ``in`` tests and the hex scan's condition only skip a regex call that could not match:
    most text has none of these characters and no long runs, and a call costs more than the test.
    """
    if "%" in text and _PERCENT.search(text):
        decoded = unquote(text, errors="replace")
        if decoded != text:
            yield "percent", decoded
    if "\\" in text and _ESCAPE.search(text):
        yield "escape", _ESCAPE.sub(lambda m: _escapes(m.group(0)), text)
    if "&" in text and _ENTITY.search(text):
        decoded = html.unescape(text)
        if decoded != text:
            yield "html_entity", decoded
    runs = False
    for match in _BASE64.finditer(text):
        runs = True
        decoded = _b64(match.group(0))
        if decoded is not None:
            yield "base64", decoded
    if not runs:
        return  # a hex run of 24 or more is also a base64-alphabet run of 16 or more
    for match in _HEX.finditer(text):
        decoded = _printable(bytes.fromhex(match.group(0)))
        if decoded is not None:
            yield "hex", decoded


_PATTERNS: Final[dict[str, str]] = {rule.kind: rule.pattern for rule in RULES}


@functools.lru_cache(maxsize=32)
def _prefilter(kinds: tuple[str, ...]) -> Any:
    """One RE2 program that matches wherever any detector of ``kinds`` could match.

    Most scanned text is clean: one search then replaces one per detector. Where it matches,
    every detector runs as before (with its capture group and validator), so findings are the
    same. RE2 keeps the union linear-time.
    """
    return re2.compile("|".join(f"(?:{_PATTERNS[kind]})" for kind in kinds))


class _Scan:
    def __init__(self, policy: DlpPolicy) -> None:
        self.policy = policy
        self.detectors = [BUILTIN_DETECTORS[d] for d in policy.detectors]
        self.prefilter = _prefilter(tuple(policy.detectors)) if policy.detectors else None
        self.findings: list[Finding] = []
        self.layers = 0

    def detect(self, text: str, path: str, layer: Layer) -> None:
        self.layers += 1
        if self.layers > self.policy.max_layers:
            raise _ScanLimit
        if self.prefilter is None or self.prefilter.search(text) is None:
            return
        for detector in self.detectors:
            for m in detector(text):
                self.findings.append(Finding(m.kind, path, layer, m.start, m.end))

    def value(self, text: str, path: str) -> None:
        self.detect(text, path, "raw")
        base = _normalized(text)
        if base != text:
            self.detect(base, path, "normalized")
        frontier: list[str] = [base]
        for _ in range(self.policy.max_depth):
            deeper: list[str] = []
            for current in frontier:
                for layer, view in _views(current):
                    folded = _normalized(view)
                    self.detect(view, path, layer)
                    if folded != view:
                        self.detect(folded, path, layer)
                    deeper.append(folded)
            frontier = deeper
            if not frontier:
                break


def string_fields(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every string inside a JSON-like ``value`` with its path (``to[0]``, ``share.note``), in order."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from string_fields(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from string_fields(item, f"{path}[{index}]")


def strings_in(value: Any) -> list[str]:
    """Every string inside a JSON-like ``value``, in order."""
    return [text for _, text in string_fields(value)]


JOINED: Final = "(joined)"
"""The field name of a finding in the concatenation of a value's strings."""


def scan_values(values: Any, policy: DlpPolicy = DEFAULT_DLP) -> DlpReport:
    """Scan every string inside ``values`` (a JSON-like value), and each neighbouring pair joined;
    fail closed on size or error."""
    try:
        strings = list(string_fields(values))
        if sum(len(s) for _, s in strings) > policy.max_chars:
            return DlpReport(failure="oversize")
        scan = _Scan(policy)
        for path, text in strings:
            scan.value(text, path)
        findings = _dedupe(scan.findings)
        if len(strings) > 1:
            # A secret split across two arguments (key id in one, the rest in another) is found by
            # scanning each pair of neighbouring strings joined, in both orders; kinds one
            # argument already shows are not reported twice.
            joined = _Scan(policy)
            texts = [text for _, text in strings]
            for first, second in zip(texts, texts[1:]):
                joined.value(first + second, JOINED)
                joined.value(second + first, JOINED)
            seen = {f.kind for f in findings}
            findings += [f for f in _dedupe(joined.findings) if f.kind not in seen]
        return DlpReport(findings=tuple(findings))
    except _ScanLimit:
        return DlpReport(failure="scan_limit")
    except Exception:  # noqa: BLE001 - any scanner fault must block, never pass the value
        return DlpReport(failure="scanner_error")


ACROSS_WINDOW: Final = 4
"""How many of the turn's latest outbound values a call's values are joined with."""


def scan_across(earlier: list[str], values: Any, policy: DlpPolicy = DEFAULT_DLP) -> DlpReport:
    """Scan what an outbound call sends joined with what the turn sent before it.

    A secret split over consecutive calls (``AKIA`` in one search, the rest in the next, or in
    three pieces over three) is in no single value. The last value sent and this call's strings
    are scanned as neighbours, and the window of the latest :data:`ACROSS_WINDOW` values sent,
    followed by this call's strings, as one text (each value alone passed already: the joins are
    what is new).
    """
    current = strings_in(values)
    report = scan_values([*earlier[-1:], *current], policy)
    if report.clean and len(earlier) > 1:
        report = scan_values("".join([*earlier[-ACROSS_WINDOW:], *current]), policy)
    return report


def scan_text(text: str, policy: DlpPolicy = DEFAULT_DLP) -> DlpReport:
    """Scan one string."""
    if not isinstance(text, str):
        return DlpReport(failure="scanner_error")
    return scan_values(text, policy)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str, str, int, int]] = set()
    out: list[Finding] = []
    for f in findings:
        key = (f.kind, f.field, f.layer, f.start, f.end)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out

