"""Argument rules: closed schemas, strict types, clamped bounds, safe text (property-based)."""

from __future__ import annotations

import json
from datetime import timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tollgate.policies.arguments import unsafe_text_reason, validate_args
from tollgate.tools.builtin import default_registry

# Every action a model is offered (the server-only background offer is never in its menu).
_SPECS = [(f"{t.name}__{a.name}", a) for t, a in default_registry().actions() if a.tier not in ("mustlist", "blocklist")]
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


def _within(schema: dict[str, Any], value: Any, defs: dict[str, Any]) -> None:
    """Assert ``value`` satisfies the numeric, length and enum bounds of ``schema``."""
    if "$ref" in schema:
        schema = defs[schema["$ref"].split("/")[-1]]
    if "anyOf" in schema:
        errors = []
        for option in schema["anyOf"]:
            try:
                _within(option, value, defs)
                return
            except AssertionError as exc:
                errors.append(exc)
        raise AssertionError(errors)
    kind = schema.get("type")
    if kind == "null":
        assert value is None
    if kind == "integer":
        assert isinstance(value, int) and not isinstance(value, bool)
        assert schema.get("minimum", value) <= value <= schema.get("maximum", value)
    if kind == "string":
        assert isinstance(value, str)
        assert len(value) <= schema.get("maxLength", len(value))
        if "enum" in schema:
            assert value in schema["enum"]
    if "enum" in schema:
        assert value in schema["enum"]
    if "const" in schema:
        assert value == schema["const"]
    if kind == "array":
        assert isinstance(value, list) and len(value) <= schema.get("maxItems", len(value))
        for item in value:
            _within(schema["items"], item, defs)


@pytest.mark.parametrize(("name", "spec"), _SPECS, ids=[n for n, _ in _SPECS])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_arbitrary_dicts_are_rejected_or_land_inside_the_bounds(name: str, spec: Any, data: st.DataObject) -> None:
    schema = spec.args.model_json_schema()
    keys = list(schema["properties"]) + ["owner_id", "tenant", "extra"]
    raw = data.draw(st.dictionaries(st.sampled_from(keys), _JSON, max_size=5))
    verdict = validate_args(spec.args, raw)
    if not verdict.ok:
        assert verdict.violations
        return
    assert set(raw) <= set(schema["properties"])  # unknown keys never pass
    dumped = verdict.value.model_dump(mode="json") if verdict.value else {}
    for key, value in dumped.items():
        _within(schema["properties"][key], value, schema.get("$defs", {}))


@pytest.mark.parametrize(("name", "spec"), _SPECS, ids=[n for n, _ in _SPECS])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_the_schema_the_model_sees_agrees_with_the_validator(name: str, spec: Any, data: st.DataObject) -> None:
    schema = default_registry().lookup(name)
    assert schema is not None
    function = next(s for s in default_registry().function_schemas() if s["function"]["name"] == name)
    params = function["function"]["parameters"]
    assert params["additionalProperties"] is False
    # Texts that the schema allows but our safety rules refuse (controls, bidi, surrogates)
    # are excluded from generation: the validator is allowed to be stricter there.
    value = data.draw(_from_schema(params, params.get("$defs", {})))
    texts = [v for v in json.dumps(value, ensure_ascii=False) if unsafe_text_reason(v)]
    strings = _strings(value)
    if texts or any(s != s.strip() or unsafe_text_reason(s) for s in strings):
        return
    verdict = validate_args(spec.args, value)
    assert verdict.ok, (value, verdict.violations)


_OFFSETS = st.sampled_from([timezone.utc, timezone(timedelta(hours=1)), timezone(timedelta(hours=-5, minutes=-30))])


def _from_schema(schema: dict[str, Any], defs: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid under the JSON schema subset our argument models produce.

    Written here because hypothesis-jsonschema does not work with the pinned Hypothesis; the
    subset is small (objects, strings with length/pattern/format/enum, bounded integers,
    booleans, arrays, anyOf-null) and an unknown construct fails the test loudly.
    """
    if "$ref" in schema:
        return _from_schema(defs[schema["$ref"].split("/")[-1]], defs)
    if "anyOf" in schema:
        return st.one_of([_from_schema(option, defs) for option in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return st.integers(schema.get("minimum", -(10**6)), schema.get("maximum", 10**6))
    if kind == "string":
        fmt = schema.get("format")
        if fmt == "date-time":
            return st.datetimes(timezones=_OFFSETS).map(lambda d: d.isoformat())
        if fmt == "date":
            return st.dates().map(lambda d: d.isoformat())
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True).filter(
                lambda v: schema.get("minLength", 0) <= len(v) <= schema.get("maxLength", 10**6)
            )
        return st.text(min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 50), 50))
    if kind == "array":
        return st.lists(
            _from_schema(schema["items"], defs), min_size=schema.get("minItems", 0), max_size=min(schema.get("maxItems", 5), 5)
        )
    if kind == "object":
        required = set(schema.get("required", []))
        props = schema.get("properties", {})
        return st.fixed_dictionaries(
            {k: _from_schema(v, defs) for k, v in props.items() if k in required},
            optional={k: _from_schema(v, defs) for k, v in props.items() if k not in required},
        )
    raise AssertionError(f"schema construct not covered: {sorted(schema)}")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    return []


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("a\x00b", "NUL byte", id="nul"),
        pytest.param("a\x07b", "control character", id="bell"),
        pytest.param("a\u202eb", "bidirectional control character", id="rlo"),
        pytest.param("a\u2066b", "bidirectional control character", id="isolate"),
        pytest.param("a\ud800b", "lone surrogate", id="lone-surrogate"),
        *(pytest.param(f"pass{ch}word", "invisible format character", id=f"invisible-U+{ord(ch):04X}")
          for ch in "\u200b\u200c\u200d\ufeff\u2060\u00ad\u2028\u2029\U000e0041"),
        pytest.param("line\nbreak\ttab", None, id="whitespace-ok"),
        pytest.param("café ☕ 日本", None, id="unicode-ok"),
    ],
)
def test_unsafe_text(text: str, reason: str | None) -> None:
    assert unsafe_text_reason(text) == reason


def test_invisible_characters_are_refused_in_arguments_unless_the_field_declares_them() -> None:
    from pydantic import TypeAdapter, ValidationError

    from tollgate.policies.arguments import SafeText

    with pytest.raises(ValidationError, match="invisible format character"):
        TypeAdapter(SafeText(50)).validate_python("send to ev\u200bil")
    family = "\U0001F468\u200d\U0001F469\u200d\U0001F467"
    assert TypeAdapter(SafeText(50, format_chars=True)).validate_python(family) == family
    with pytest.raises(ValidationError, match="bidirectional"):
        TypeAdapter(SafeText(50, format_chars=True)).validate_python("a\u202eb")


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param([], id="array"),
        pytest.param("{}", id="string"),
        pytest.param(None, id="null"),
        pytest.param({"limit": float("nan")}, id="nan"),
        pytest.param({"limit": float("inf")}, id="infinity"),
        pytest.param({"limit": True}, id="bool-as-int"),
        pytest.param({"limit": 3.0}, id="float-as-int"),
        pytest.param({"range": "today", "owner_id": "victim"}, id="owner-key"),
    ],
)
def test_non_objects_and_wrong_types_fail_closed(raw: Any) -> None:
    from tollgate.tools.args import CalendarListArgs

    assert not validate_args(CalendarListArgs, raw).ok


def test_counts_clamp_into_their_bounds() -> None:
    from tollgate.tools.args import CalendarListArgs

    assert validate_args(CalendarListArgs, {"limit": 10_000}).value == CalendarListArgs(limit=25)
    assert validate_args(CalendarListArgs, {"limit": -3}).value == CalendarListArgs(limit=1)
