"""The event-contract checker itself: it must catch each kind of breach."""

from __future__ import annotations

from typing import Any

import pytest

from tollgate.graph.event_contract import ContractViolation, EventContract
from tollgate.graph.events import TurnEvent


def ev(type_: str, seq: int, turn: str = "t1", **data: Any) -> TurnEvent:
    return TurnEvent(type=type_, seq=seq, turn_id=turn, ts="2026-11-30T09:00:00+00:00", data=data)  # type: ignore[typeddict-item]


GOOD = [ev("planner_decision", 1), ev("tool_start", 2, call_id="c"), ev("tool_end", 3, call_id="c"), ev("message_complete", 4)]


def test_a_well_formed_run_passes() -> None:
    contract = EventContract()
    contract.check_run(GOOD)
    assert contract.runs_checked == 1


def test_an_approval_pairs_with_its_resume() -> None:
    contract = EventContract()
    contract.check_run([ev("planner_decision", 1), ev("approval_required", 2)])
    contract.check_run([ev("approval_decided", 3), ev("tool_start", 4, call_id="c"), ev("tool_end", 5, call_id="c"),
                        ev("message_complete", 6)], resume=True)


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        pytest.param([([], False)], "no events", id="empty"),
        pytest.param([([ev("planner_decision", 2), ev("message_complete", 2)], False)], "seq", id="seq-not-increasing"),
        pytest.param([([ev("tool_start", 1, call_id="c"), ev("message_complete", 2)], False)], "without tool_end", id="start-without-end"),
        pytest.param([([ev("tool_end", 1, call_id="c"), ev("message_complete", 2)], False)], "without tool_start", id="end-without-start"),
        pytest.param([([ev("message_complete", 1), ev("planner_decision", 2)], False)], "not the last", id="event-after-terminal"),
        pytest.param([([ev("planner_decision", 1)], False)], "ended with", id="no-terminal"),
        pytest.param([([ev("bogus", 1), ev("message_complete", 2)], False)], "unknown event", id="unknown-type"),
        pytest.param([([ev("approval_decided", 1), ev("message_complete", 2)], True)], "not awaiting", id="resume-without-approval"),
        pytest.param([([ev("approval_required", 1)], False), ([ev("approval_decided", 1), ev("message_complete", 2)], True)],
                     "seq", id="resume-restarts-seq"),
        pytest.param([([ev("planner_decision", 1), ev("message_complete", 2, turn="t2")], False)], "two turns", id="mixed-turns"),
    ],
)
def test_breaches_are_caught(runs: list[tuple[list[TurnEvent], bool]], message: str) -> None:
    contract = EventContract()
    with pytest.raises(ContractViolation, match=message):
        for events, resume in runs:
            contract.check_run(events, resume=resume)
