"""Argument rules: closed models, strict decoding, bounded values, safe text.

Every action's arguments are a frozen pydantic model with ``extra="forbid"`` built from the
bounded field types here. :func:`validate_args` is the one strict decoder: it takes whatever
the model (or an editing human) produced and returns either the validated model or the list
of violations, never a partially trusted value. Counts are *clamped* into their bounds (a
model asking for 500 rows gets the ceiling); everything else out of bounds is refused.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Annotated, Any, Final

from annotated_types import Interval
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    StringConstraints,
    ValidationError,
)

from tollgate.policies.storable import BIDI_CONTROLS, MAX_DEPTH, depth_of

__all__ = [
    "ArgsModel",
    "ArgsVerdict",
    "Count",
    "IdRef",
    "SafeText",
    "unsafe_text_reason",
    "load_args",
    "validate_args",
]

_ALLOWED_CONTROLS: Final = frozenset("\t\n\r")


def unsafe_text_reason(text: str, *, format_chars: bool = False) -> str | None:
    """Why ``text`` may not reach a tool, or ``None`` when it is acceptable.

    Refuses NUL and other C0/C1 control characters (tab and newlines excepted), lone UTF-16
    surrogates (unencodable, and a classic filter bypass) and bidi controls; and, unless
    ``format_chars``, invisible format characters (Unicode category Cf: zero-width space and
    joiners, word joiner, byte-order mark, soft hyphen, tag characters) and the line and
    paragraph separators: they hide text from the person who reads the preview, and split words
    past the DLP scan.
    """
    for ch in text:
        code = ord(ch)
        if 0xD800 <= code <= 0xDFFF:
            return "lone surrogate"
        if ch in BIDI_CONTROLS:  # text that renders otherwise than a reviewer reads it
            return "bidirectional control character"
        if ch in _ALLOWED_CONTROLS:
            continue
        category = unicodedata.category(ch)
        if category == "Cc":
            return "NUL byte" if code == 0 else "control character"
        if not format_chars and category in ("Cf", "Zl", "Zp"):
            return "invisible format character"
    return None


def _checker(*, format_chars: bool) -> Any:
    def check(value: str) -> str:
        reason = unsafe_text_reason(value, format_chars=format_chars)
        if reason is not None:
            raise ValueError(f"text contains a {reason}")
        return value

    return check


_check_text = _checker(format_chars=False)


def SafeText(  # noqa: N802 - a type factory
    max_length: int, *, min_length: int = 1, strip: bool = False, format_chars: bool = False
) -> Any:
    """A string of bounded length with no control, surrogate, bidi or invisible format characters.

    The value arrives as sent: surrounding whitespace is kept unless ``strip`` says the schema
    strips it. ``min_length=0`` allows the empty string. A field that needs zero-width joiners
    (emoji sequences, some scripts) declares ``format_chars=True``; bidi controls stay refused.
    """
    return Annotated[
        str,
        StringConstraints(min_length=min_length, max_length=max_length, strip_whitespace=strip),
        AfterValidator(_checker(format_chars=format_chars)),
    ]


def _clamper(lo: int, hi: int) -> Any:
    def clamp(value: object) -> object:
        # Only genuine integers are clamped; a bool, float or string stays as it is and is
        # refused by the strict int check that follows.
        if isinstance(value, int) and not isinstance(value, bool):
            return min(max(value, lo), hi)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return value  # refused below: the schema says integer
        return value

    return clamp


def Count(lo: int, hi: int) -> Any:  # noqa: N802 - a type factory
    """An integer count clamped into ``[lo, hi]``; the schema the model sees states the bounds."""
    # The validator is listed last so it wraps the constrained int: it clamps first, then the
    # strict, bounded int check runs, and the JSON schema keeps minimum/maximum.
    return Annotated[int, Interval(ge=lo, le=hi), BeforeValidator(_clamper(lo, hi))]


IdRef = Annotated[str, StringConstraints(min_length=1, max_length=512), AfterValidator(_check_text)]
"""An id the server returned in this thread, or a position in the latest list such as ``"#2"``.

The value carries no authority: id validation checks it against its kind's shape and the ids
the server returned (:mod:`policies.ids`).
"""


class ArgsModel(BaseModel):
    """Base of every action's argument model: frozen, closed, strictly typed, taken as sent (no stripping)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


@dataclass(frozen=True, slots=True)
class ArgsVerdict:
    """The outcome of strict decoding: the validated model, or the violations."""

    value: BaseModel | None
    """The validated arguments, when decoding succeeded."""
    violations: tuple[str, ...] = ()
    """One line per violation, naming the field and the rule (never the offending value)."""

    @property
    def ok(self) -> bool:
        """Whether the arguments were accepted."""
        return self.value is not None


_LOC_SAFE = re.compile(r"[^A-Za-z0-9_.()\[\]-]")


def _describe(err: Any) -> str:
    loc = ".".join(str(part) for part in err.get("loc", ())) or "(arguments)"
    loc = _LOC_SAFE.sub("?", loc)[:80]
    kind = err.get("type", "invalid")
    msg = str(err.get("msg", "invalid value"))
    if kind == "extra_forbidden":
        msg = "unknown key (this function takes no such argument)"
    return f"{loc}: {msg}"


def validate_args(model: type[BaseModel], raw: object) -> ArgsVerdict:
    """Strictly decode ``raw`` (a JSON object from a model or a person) into ``model``.

    The input is re-encoded as JSON and parsed in pydantic's JSON mode so that exactly the
    JSON types are accepted (``"5"`` is not an integer, ``true`` is not a number, NaN and
    infinities are refused). Anything that is not a JSON object is refused whole.
    """
    if not isinstance(raw, dict):
        return ArgsVerdict(None, ("(arguments): expected a JSON object",))
    if depth_of(raw) > MAX_DEPTH:
        return ArgsVerdict(None, (f"(arguments): nested deeper than {MAX_DEPTH} levels",))
    try:
        encoded = json.dumps(raw, allow_nan=False, ensure_ascii=True)
    except (TypeError, ValueError):
        return ArgsVerdict(None, ("(arguments): not representable as JSON (NaN, infinity or a non-JSON type)",))
    try:
        value = model.model_validate_json(encoded)
    except ValidationError as exc:
        return ArgsVerdict(None, tuple(_describe(e) for e in exc.errors(include_input=False)))
    return ArgsVerdict(value)


def load_args(model: type[BaseModel], args: dict[str, Any]) -> BaseModel:
    """Rebuild a model from arguments that already passed :func:`validate_args` (JSON values).

    Decoded in JSON mode like the first time, so ISO date strings and the like round-trip under
    the strict models; a value that no longer validates raises ``ValidationError``.
    """
    return model.model_validate_json(json.dumps(args, allow_nan=False))
