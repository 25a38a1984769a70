"""Drive the real compiled graph on real PostgreSQL, checking the event contract on every run."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from langgraph.graph.state import CompiledStateGraph

from tollgate.graph.event_contract import EventContract
from tollgate.graph.governed import GovernedGraph
from tollgate.graph.ledger.approval_contract import check_approvals
from tollgate.graph.runner import TurnOutcome, TurnRunner
from tollgate.graph.state import Context


@dataclass
class Clock:
    """A settable server clock (a collaborator passed to Services, not a patch)."""

    now: datetime

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@dataclass
class Turns:
    """A runner plus the event-contract checker applied to every run it makes, and the approval
    contract (:mod:`graph.ledger.approval_contract`) checked on every thread it ran on, after each run."""

    runner: TurnRunner
    contract: EventContract = field(default_factory=EventContract)
    outcomes: list[TurnOutcome] = field(default_factory=list)
    threads: set[str] = field(default_factory=set)

    async def check_approvals(self, *thread_ids: str) -> None:
        """The approval contract on ``thread_ids`` (and every thread this harness ran on)."""
        self.threads.update(thread_ids)
        await check_approvals(self.runner.services.db.pool, self.runner.graph, self.threads)

    async def send(self, ctx: Context, thread_id: str, message: str) -> TurnOutcome:
        self.threads.add(thread_id)
        out = await self.runner.send(ctx, thread_id, message)
        self.contract.check_run(out.events)
        self.outcomes.append(out)
        await self.check_approvals()
        return out

    async def resume(self, ctx: Context, thread_id: str, value: Any) -> TurnOutcome:
        self.threads.add(thread_id)
        try:
            out = await self.runner.resume(ctx, thread_id, value)
        finally:
            await self.check_approvals()
        self.contract.check_run(out.events, resume=True)
        self.outcomes.append(out)
        return out

    async def decide(self, ctx: Context, approval_id: str, decision: dict[str, Any]) -> TurnOutcome:
        try:
            out = await self.runner.decide(ctx, approval_id, decision)
        finally:
            await self.check_approvals()
        self.threads.add(out.thread_id)
        self.contract.check_run(out.events, resume=True)
        self.outcomes.append(out)
        await self.check_approvals()
        return out


def what_runs(preview: str) -> str:
    """An approval's preview without the card's first line ("You asked: …") and its ⓘ notes: its
    warnings, then what will run."""
    parts = preview.split("\n\n")
    if parts and parts[0].startswith("You asked: "):
        parts = parts[1:]
    while parts and parts[0].startswith("ⓘ "):
        parts = parts[1:]
    return "\n\n".join(parts)


def unguarded(graph: GovernedGraph) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The same compiled graph without its entry guards (no lease, routing and state edits let
    through): what code with the database's credentials could run, for the tests of the checks
    that hold even then (the effect's own authority)."""
    attrs = {k: v for k, v in vars(graph).items() if k not in ("services", "__orig_class__")}
    return CompiledStateGraph(**attrs)
