"""The routing eval: natural requests through the offline picker, scored against expected outcomes.

Each case (``cases.jsonl``) is a request, an optional context and the expected outcome: a call
(tool, action and a subset of its arguments; times compared as exact ISO strings), a plain
``reply`` or a ``clarify`` question. Two evaluators score every case:

* :class:`ExactMatch` — the right outcome; for calls the right tool, action and key arguments.
* :class:`NoWrongWrite` — a write was emitted where a different outcome (a reply, a question,
  a read or another write) was expected. Must be zero: a wrong write is the one mistake an
  offline picker may never make.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from langchain_core.messages import AIMessage

from tollgate.nodes.offline import OfflinePicker
from tollgate.nodes.offline.functions import KNOWN, known_function_schemas
from tollgate.nodes.picker_prompt import PickerContext, build_messages
from tollgate.policies.arguments import validate_args

__all__ = [
    "ACCURACY_FLOOR",
    "CASES_PATH",
    "INDEPENDENT_FLOOR",
    "INDEPENDENT_PATH",
    "INDEPENDENT_SETTINGS",
    "PLUGINS_FLOOR",
    "PLUGINS_PATH",
    "Case",
    "CaseResult",
    "ExactMatch",
    "Expected",
    "NoWrongWrite",
    "Outcome",
    "Report",
    "load_cases",
    "run_independent_eval",
    "run_plugins_eval",
    "run_routing_eval",
]

CASES_PATH: Final = Path(__file__).with_name("cases.jsonl")
"""The original set: written with the picker's grammar."""

INDEPENDENT_PATH: Final = Path(__file__).with_name("independent.jsonl")
"""The independent set: requests written as people phrase them, not from the grammar (web tools on)."""

PLUGINS_PATH: Final = Path(__file__).with_name("plugins.jsonl")
"""The plug-in set: tools defined only in the eval (:mod:`evals.routing.plugin_tools`) and the
shipped bookmarks example, besides the built-ins; requests written as people phrase them."""

PLUGINS_FLOOR: Final = 0.95
"""The exact-match accuracy the offline picker must keep on the plug-in set (no wrong write, ever)."""

INDEPENDENT_SETTINGS: Final[dict[str, Any]] = {"web_tools": True, "search_url": "http://search.invalid"}
"""The registry settings the independent set is asked under: every built-in tool, the web ones too."""

ACCURACY_FLOOR: Final = 1.0
"""The exact-match accuracy the offline picker must keep on the original set (the level reached)."""

INDEPENDENT_FLOOR: Final = 0.9
"""The exact-match accuracy it must keep on the independent set (the goal; 94.4 % reached)."""

_NONCE: Final = "5eed" * 8  # fixed, so a run is reproducible byte for byte
_DEFAULT_CONTEXT: Final[dict[str, Any]] = {
    "now": "2026-11-30T10:00:00+01:00",
    "timezone": "Europe/Paris",
    "recent": {},
    "latest_kind": None,
    "prior_user_turns": [],
}


@dataclass(frozen=True, slots=True)
class Expected:
    """What a case expects."""

    outcome: Literal["call", "reply", "clarify"]
    """A tool call, a plain reply or a clarifying question."""
    tool: str | None = None
    """For calls: the tool."""
    action: str | None = None
    """For calls: the action."""
    args: Mapping[str, Any] = field(default_factory=dict)
    """For calls: the arguments that must match (a subset; defaults count as given)."""


@dataclass(frozen=True, slots=True)
class Case:
    """One routing case."""

    name: str
    """A unique, readable name."""
    utterance: str
    """The user's request, verbatim."""
    context: PickerContext
    """The picker context the request is asked in."""
    expect: Expected
    """The expected outcome."""
    tags: tuple[str, ...] = ()
    """Labels (``negative``, ``typo``, ``positional``...)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the picker did."""

    kind: str
    """``call``, ``reply``, ``clarify`` or ``done``."""
    tool: str | None = None
    """For calls: the tool of the function called."""
    action: str | None = None
    """For calls: the action."""
    args: Mapping[str, Any] = field(default_factory=dict)
    """For calls: the arguments, with the model's defaults filled in."""
    writes: bool = False
    """For calls: whether the action changes data."""
    text: str = ""
    """For replies: the text."""

    def describe(self) -> str:
        """A one-line rendering for the failure list."""
        if self.kind == "call":
            return f"{self.tool}.{self.action} {json.dumps(dict(self.args), ensure_ascii=False, sort_keys=True)}"
        return f"{self.kind}: {self.text[:90]!r}"


@dataclass(frozen=True, slots=True)
class ExactMatch:
    """The right outcome: for calls, the right tool, action and key arguments."""

    def evaluate(self, case: Case, got: Outcome) -> tuple[bool, str]:
        """Whether ``got`` is what ``case`` expects, and why not."""
        want = case.expect
        if want.outcome != "call":
            if got.kind != want.outcome:
                return False, f"expected {want.outcome}"
            if "capabilities" in case.tags and got.text != case.context["capabilities"]:
                return False, "expected the capability summary verbatim"
            return True, ""
        if got.kind != "call":
            return False, f"expected {want.tool}.{want.action}"
        if (got.tool, got.action) != (want.tool, want.action):
            return False, f"expected {want.tool}.{want.action}"
        wrong = [k for k, v in want.args.items() if got.args.get(k, _MISSING) != v]
        if wrong:
            return False, "args differ: " + ", ".join(f"{k}={want.args[k]!r}" for k in wrong)
        return True, ""


@dataclass(frozen=True, slots=True)
class NoWrongWrite:
    """A write was emitted where a different outcome was expected (must never happen)."""

    def evaluate(self, case: Case, got: Outcome) -> tuple[bool, str]:
        """Whether ``got`` avoids a wrong write, and which write it was otherwise."""
        want = case.expect
        if got.kind != "call" or not got.writes:
            return True, ""
        if want.outcome == "call" and (want.tool, want.action) == (got.tool, got.action):
            return True, ""
        return False, f"wrong write {got.tool}.{got.action}"


_MISSING: Final = object()


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One scored case."""

    case: Case
    """The case."""
    got: Outcome
    """What the picker did."""
    exact: bool
    """Whether it matched exactly."""
    wrong_write: bool
    """Whether it emitted a write where something else was expected."""
    reason: str = ""
    """Why it failed, when it did."""


@dataclass(frozen=True, slots=True)
class Report:
    """All results, with accuracy per tool."""

    results: tuple[CaseResult, ...]
    """Every case, in file order."""

    @property
    def accuracy(self) -> float:
        """The share of exact matches."""
        return sum(r.exact for r in self.results) / len(self.results) if self.results else 0.0

    @property
    def clarified(self) -> int:
        """Cases that were not exact because the picker asked a question instead."""
        return sum(1 for r in self.results if not r.exact and r.got.kind == "clarify")

    @property
    def wrong(self) -> int:
        """Cases that were neither exact nor a question: another call, or a reply where a call was expected."""
        return sum(1 for r in self.results if not r.exact and r.got.kind != "clarify")

    def summary(self) -> str:
        """One line: cases, exact, clarified, wrong, wrong writes."""
        n = len(self.results)
        return (f"{n} cases: {sum(r.exact for r in self.results)} exact ({self.accuracy:.1%}), {self.clarified} clarified, "
                f"{self.wrong} wrong, {self.wrong_writes} wrong writes")

    @property
    def wrong_writes(self) -> int:
        """How many cases emitted a wrong write."""
        return sum(r.wrong_write for r in self.results)

    @property
    def failures(self) -> tuple[CaseResult, ...]:
        """The cases that did not match exactly."""
        return tuple(r for r in self.results if not r.exact or r.wrong_write)

    def by_group(self) -> dict[str, tuple[int, int, int]]:
        """Group -> (cases, exact, wrong writes); the group is the expected tool, or ``(no call)``."""
        out: dict[str, tuple[int, int, int]] = {}
        for r in self.results:
            group = r.case.expect.tool or "(no call)"
            n, exact, wrong = out.get(group, (0, 0, 0))
            out[group] = (n + 1, exact + r.exact, wrong + r.wrong_write)
        return out

    def table(self) -> str:
        """The results table, the failures and the verdict against the floor."""
        lines = [f"{'tool':<12}{'cases':>7}{'exact':>7}{'accuracy':>10}{'wrong writes':>14}"]
        for group, (n, exact, wrong) in sorted(self.by_group().items()):
            lines.append(f"{group:<12}{n:>7}{exact:>7}{exact / n:>10.1%}{wrong:>14}")
        total = len(self.results)
        lines.append(f"{'total':<12}{total:>7}{sum(r.exact for r in self.results):>7}{self.accuracy:>10.1%}{self.wrong_writes:>14}")
        negatives = [r for r in self.results if "negative" in r.case.tags]
        lines.append(f"negatives: {len(negatives)} cases, {sum(r.exact for r in negatives)} exact, {sum(r.wrong_write for r in negatives)} wrong writes")
        if self.failures:
            lines.append("")
            lines.append("failures:")
            for r in self.failures:
                lines.append(f"  {r.case.name}: {r.case.utterance!r}")
                lines.append(f"      got {r.got.describe()}  -- {r.reason}")
        return "\n".join(lines)

    def passed(self, floor: float = ACCURACY_FLOOR) -> bool:
        """Whether accuracy is at least ``floor`` and there is no wrong write."""
        return self.accuracy >= floor and self.wrong_writes == 0


def _expected(raw: object) -> Expected:
    if raw == "reply":
        return Expected("reply")
    if raw == "clarify":
        return Expected("clarify")
    if isinstance(raw, Mapping) and isinstance(raw.get("tool"), str) and isinstance(raw.get("action"), str):
        return Expected("call", raw["tool"], raw["action"], dict(raw.get("args") or {}))
    raise ValueError(f"unreadable expectation {raw!r}")


def load_cases(path: Path = CASES_PATH, capabilities: str = "") -> list[Case]:
    """The cases of ``path``; lines with ``preset`` define named contexts cases can refer to."""
    presets: dict[str, dict[str, Any]] = {}
    cases: list[Case] = []
    names: set[str] = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        if "preset" in record:
            presets[record["preset"]] = record["context"]
            continue
        if "name" not in record:
            continue  # a comment line
        raw_ctx = record.get("context")
        if isinstance(raw_ctx, str):
            raw_ctx = {"preset": raw_ctx}
        ctx = dict(_DEFAULT_CONTEXT)
        if isinstance(raw_ctx, Mapping):
            overrides = dict(raw_ctx)
            base = overrides.pop("preset", None)
            if base is not None:
                if base not in presets:
                    raise ValueError(f"line {number}: unknown preset {base!r}")
                ctx.update(presets[base])
            ctx.update(overrides)
        ctx["capabilities"] = capabilities
        if record["name"] in names:
            raise ValueError(f"line {number}: duplicate case name {record['name']!r}")
        names.add(record["name"])
        context: PickerContext = {
            "now": ctx["now"],
            "timezone": ctx["timezone"],
            "recent": ctx["recent"],
            "latest_kind": ctx.get("latest_kind"),
            "prior_user_turns": list(ctx.get("prior_user_turns") or []),
            "capabilities": capabilities,
        }
        cases.append(Case(record["name"], record["utterance"], context, _expected(record["expect"]), tuple(record.get("tags", ()))))
    return cases


@dataclass(frozen=True, slots=True)
class _Functions:
    """The bound schemas, and what each function name stands for."""

    schemas: list[dict[str, Any]]
    meaning: dict[str, tuple[str, str, Any, bool]]  # name -> (tool, action, args model, writes)
    capabilities: str


def _functions(settings: Mapping[str, Any] | None = None, extra: Sequence[Any] = ()) -> _Functions:
    if importlib.util.find_spec("tollgate.tools.builtin") is None:  # no built-in registry: the arg models alone
        schemas = known_function_schemas()
        meaning = {f"{t}__{a}": (t, a, k.args, k.writes) for (t, a), k in KNOWN.items()}
        return _Functions(schemas, meaning, "I can help with your mail, calendar, tasks and reminders.")
    builtin = importlib.import_module("tollgate.tools.builtin")
    registry = builtin.default_registry(settings)
    if extra:
        registry = importlib.import_module("tollgate.tools.registry").Registry(
            [*builtin.enabled_builtins(settings), *extra], settings)
    meaning = {f"{t.name}__{a.name}": (t.name, a.name, a.args, a.writes) for t, a in registry.actions()}
    return _Functions(registry.function_schemas(), meaning, registry.capability_summary())


def _outcome(message: AIMessage, functions: _Functions) -> Outcome:
    if message.tool_calls:
        call = message.tool_calls[0]
        found = functions.meaning.get(call["name"])
        if found is None:
            return Outcome("call", call["name"], "?", dict(call["args"]), True)
        tool, action, model, writes = found
        verdict = validate_args(model, call["args"])
        merged = dict(verdict.value.model_dump(mode="json")) if verdict.value is not None else {}
        merged.update(call["args"])  # the emitted strings (times) are compared as written
        return Outcome("call", tool, action, merged, writes)
    outcome = str(message.response_metadata.get("outcome", "reply"))
    return Outcome(outcome, text=message.text)


def run_cases(cases: Sequence[Case], functions: _Functions | None = None) -> Report:
    """Run ``cases`` through the offline picker bound to the built-in functions."""
    functions = functions or _functions()
    model = OfflinePicker().bind_tools(functions.schemas)
    exact_match, no_wrong_write = ExactMatch(), NoWrongWrite()
    results = []
    for case in cases:
        message = model.invoke(build_messages(case.utterance, case.context, _NONCE))
        got = _outcome(message, functions)
        exact, why = exact_match.evaluate(case, got)
        safe, why_write = no_wrong_write.evaluate(case, got)
        results.append(CaseResult(case, got, exact, not safe, why_write or why))
    return Report(tuple(results))


def run_routing_eval(path: Path = CASES_PATH, settings: Mapping[str, Any] | None = None) -> Report:
    """Load the cases, run them against the built-in tools enabled for ``settings``, and return the report."""
    functions = _functions(settings)
    return run_cases(load_cases(path, functions.capabilities), functions)


def run_independent_eval() -> Report:
    """The independent set, with the web tools on."""
    return run_routing_eval(INDEPENDENT_PATH, INDEPENDENT_SETTINGS)


def run_plugins_eval() -> Report:
    """The plug-in set: the built-ins, the eval's own tools and the shipped bookmarks example."""
    from tollgate_bookmarks import BOOKMARKS

    from tollgate.evals.routing.plugin_tools import PLUGIN_TOOLS

    functions = _functions(None, (*PLUGIN_TOOLS, BOOKMARKS))
    return run_cases(load_cases(PLUGINS_PATH, functions.capabilities), functions)
