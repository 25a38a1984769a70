"""P1, P2, P4, P5, P6: the governed turn against a bare ``create_agent`` on the same PostgreSQL."""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import HumanMessage
from langchain_core.tools import StructuredTool
from langgraph.types import Command

from bench.env import Env, compare
from bench.models import CyclicModel
from bench.owners import demo_owner
from bench.roundtrips import RoundTrips, open_counted_database
from bench.rows import Row
from tollgate.graph.runner import TurnRunner
from tollgate.graph.services import Services
from tollgate.graph.state import Context
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database, open_database
from tollgate.graph.store.owner_scope import owner_transaction
from tollgate.graph.turn import build_graph
from tollgate.policies.arguments import ArgsModel
from tollgate.tools.args import CalendarListArgs, TaskCreateArgs
from tollgate.tools.builtin import builtin_tools, default_registry
from tollgate.tools.calendar import CALENDAR, list_events
from tollgate.tools.tasks import TASKS, create_task
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, Registry, ToolSpec

__all__ = ["Row", "run_turn_benchmarks"]

_TZ = "Europe/Paris"


def _read_call(_text: str) -> tuple[str, dict[str, Any]]:
    return "calendar__list", {"range": "today"}


def _task_call(text: str) -> tuple[str, dict[str, Any]]:
    return "tasks__create", {"title": text[:60]}


def _runner(
    db: Database, env: Env, saver: Any, model: CyclicModel, registry: Registry | None = None, *, prune: bool = True
) -> TurnRunner:
    settings = env.settings if prune else env.settings.model_copy(update={"checkpoint_prune_every": 0})
    svc = Services(settings=settings, db=db, registry=registry or default_registry(), picker_model=model,
                   approval_key=settings.approval_key())
    return TurnRunner(build_graph(svc, checkpointer=saver), svc)


async def _read(runner: TurnRunner, ctx: Context, prefix: str) -> None:
    """One governed read turn on a new thread."""
    out = await runner.send(ctx, prefix + uuid.uuid4().hex, "what's on my calendar today?")
    assert out.outcome == "read", out.outcome


async def _write_and_approve(runner: TurnRunner, ctx: Context, prefix: str) -> None:
    """A write turn on a new thread, then its approval."""
    out = await runner.send(ctx, prefix + uuid.uuid4().hex, "add a task to water the plants")
    assert out.approval is not None, out.outcome
    done = await runner.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed", done.outcome


def _bare_agent(db: Database, saver: Any, owner: str) -> Any:
    async def list_calendar(range: str) -> str:  # noqa: A002 - the tool's argument name
        """List calendar events in a window."""
        async with owner_transaction(db.pool, owner) as conn:
            result = await list_events(ExecContext(owner, _TZ, datetime.now(UTC), conn), CalendarListArgs(range=range))
        return CALENDAR.actions[0].renderer(result)

    tool = StructuredTool.from_function(coroutine=list_calendar, name="list_calendar")
    model = CyclicModel(call=lambda _t: ("list_calendar", {"range": "today"}), reply="Here is your day.")
    return create_agent(model, tools=[tool], checkpointer=saver)


def _bare_approving_agent(db: Database, saver: Any, owner: str) -> Any:
    """P2's fair anchor: a bare ``create_agent`` that asks a person before its write, as LangChain
    builds one (``HumanInTheLoopMiddleware`` on the same ``AsyncPostgresSaver``), adding the same task."""
    async def add_task(title: str) -> str:
        """Add a task."""
        async with owner_transaction(db.pool, owner) as conn:
            result = await create_task(ExecContext(owner, _TZ, datetime.now(UTC), conn), TaskCreateArgs(title=title))
        return TASKS.actions[1].renderer(result)

    tool = StructuredTool.from_function(coroutine=add_task, name="add_task")
    model = CyclicModel(call=lambda text: ("add_task", {"title": text[:60]}), reply="Added it.")
    return create_agent(model, tools=[tool], checkpointer=saver,
                        middleware=[HumanInTheLoopMiddleware(interrupt_on={"add_task": True})])


async def _bare_read(agent: Any) -> None:
    """One bare read turn on a new thread."""
    await agent.ainvoke({"messages": [HumanMessage("what's on my calendar today?")]},
                        {"configurable": {"thread_id": "bare-" + uuid.uuid4().hex}})


async def _bare_write_and_resume(agent: Any) -> None:
    """P2's anchor on a new thread: the write, which asks first, then its approval."""
    config = {"configurable": {"thread_id": "bare-hitl-" + uuid.uuid4().hex}}
    asked = await agent.ainvoke({"messages": [HumanMessage("add a task to water the plants")]}, config, version="v2")
    assert asked.interrupts, "the bare agent did not ask before its write"
    done = await agent.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), config, version="v2")
    assert not done.interrupts and done.value["messages"][-1].text == "Added it.", done


async def _trips_per_run(trips: RoundTrips, flows: dict[str, Callable[[], Awaitable[None]]], n: int) -> dict[str, float]:
    """Round trips per run of each flow (``n`` runs), after 3 of each to warm up (psycopg prepares
    each statement once per connection)."""
    for _ in range(3):
        for flow in flows.values():
            await flow()
    per_run: dict[str, float] = {}
    for name, flow in flows.items():
        with trips.window() as total:
            for _ in range(n):
                await flow()
        per_run[name] = total[0] / n
    return per_run


async def _thread_bytes(db: Database, thread_id: str) -> int:
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            """SELECT coalesce((SELECT sum(pg_column_size(c.*)) FROM checkpoints c WHERE thread_id = %(t)s), 0)
                    + coalesce((SELECT sum(pg_column_size(b.*)) FROM checkpoint_blobs b WHERE thread_id = %(t)s), 0)
                    + coalesce((SELECT sum(pg_column_size(w.*)) FROM checkpoint_writes w WHERE thread_id = %(t)s), 0)
                    + coalesce((SELECT sum(pg_column_size(x.*)) FROM transcript x WHERE thread_id = %(t)s), 0) AS n""",
            {"t": thread_id},
        )
        row = await cur.fetchone()
    return int(row["n"]) if row else 0


class _NoArgs(ArgsModel):
    """No arguments."""


async def _noop(ctx: ExecContext, args: Any) -> ActionResult:
    return {"tool": "x", "action": "lookup", "kind": "item", "summary": "nothing"}


def _registry_of(size: int) -> Registry:
    """The built-ins plus synthetic read tools up to ``size`` actions."""
    base = list(builtin_tools())
    count = sum(len(t.actions) for t in base)
    words = ["invoice", "parcel", "flight", "recipe", "stock", "train", "hotel", "podcast", "ticket", "receipt"]
    extra = [
        ToolSpec(name=f"{words[i % 10]}_{i}", description=f"Look up {words[i % 10]} records.",
                 capability_phrase=f"look up {words[i % 10]}s",
                 actions=(ActionSpec("lookup", f"Find a {words[i % 10]}.", _NoArgs, "allowlist", _noop, lambda r: "",
                                     (f"find my {words[i % 10]}",)),))
        for i in range(max(0, size - count))
    ]
    return Registry((*base, *extra))


def _cpu_counted(
    fn: Callable[[], Awaitable[None]], spent: list[float], waited: list[float] | None = None
) -> Callable[[], Awaitable[None]]:
    """``fn``, adding the process's CPU seconds of each call to ``spent`` and, with ``waited``, the
    rest of its wall time there (what it waited for: the database, mostly). Calls run one at a time."""
    async def counted() -> None:
        start, wall = time.process_time(), time.perf_counter()
        await fn()
        cpu = time.process_time() - start
        spent.append(cpu)
        if waited is not None:
            waited.append(time.perf_counter() - wall - cpu)
    return counted


async def _compare_counted(
    a: Callable[[], Awaitable[None]], b: Callable[[], Awaitable[None]], rounds: int, warmup: int
) -> tuple[float, float, tuple[list[float], list[float]], tuple[list[float], list[float]]]:
    """:func:`bench.env.compare` of ``a`` and ``b`` after ``warmup`` calls of each, with each side's
    CPU and waiting seconds per counted call (:func:`_cpu_counted`)."""
    for _ in range(warmup):
        await a()
        await b()
    spent_a: tuple[list[float], list[float]] = ([], [])
    spent_b: tuple[list[float], list[float]] = ([], [])
    median_a, median_b = await compare(_cpu_counted(a, *spent_a), _cpu_counted(b, *spent_b), rounds, warmup=0)
    return median_a, median_b, spent_a, spent_b


def _ms(values: list[float]) -> float:
    """The median of ``values`` (seconds), in milliseconds."""
    return statistics.median(values) * 1e3


def _floor(id_: str, ours: str, cpu: list[float], theirs: str, their_median: float) -> Row:
    """The ratio its row could reach if the database answered in no time: this process's CPU for
    ``ours`` alone (median of the same rounds) over ``theirs`` whole median time, waits included."""
    cpu_ms, their_ms = _ms(cpu), their_median * 1e3
    return Row(id_, f"the floor with no database wait: CPU of {ours} in this process / {theirs} whole time "
               "(same rounds)", f"{cpu_ms:.1f} ms / {their_ms:.1f} ms = {cpu_ms / their_ms:.2f}", "-", None)


@asynccontextmanager
async def _open(env: Env) -> AsyncIterator[tuple[Database, Any]]:
    async with open_database(env.settings) as db:
        yield db, await open_checkpointer(db)


async def run_turn_benchmarks(env: Env, *, smoke: bool) -> list[Row]:
    """Run P1, P2, P4, P5, P6 and return their rows."""
    rounds, warmup = (3, 1) if smoke else (60, 5)
    rows: list[Row] = []
    async with _open(env) as (db, saver):
        owner = await demo_owner(db, "bench", _TZ)
        ctx = Context(owner_id=owner, timezone=_TZ)
        ours = _runner(db, env, saver, CyclicModel(call=_read_call))
        bare = _bare_agent(db, saver, owner)

        async def governed_read() -> None:
            await _read(ours, ctx, "p1-")

        async def bare_turn() -> None:
            await _bare_read(bare)

        a, b, (read_cpu, read_wait), (bare_cpu, bare_wait) = await _compare_counted(governed_read, bare_turn, rounds, warmup)
        rows.append(Row("P1", "governed read turn / bare create_agent turn", f"{a * 1e3:.1f} ms / {b * 1e3:.1f} ms = {a / b:.2f}",
                        "≤ 1.2", a / b <= 1.2))
        # Where P1's gap is: this process's CPU, and the time a turn waits with the CPU idle (the
        # database's answers on the turn's path; the bare agent's checkpoint writes overlap its steps).
        rows.append(Row("P1", "a read turn in this process, medians of the same rounds: CPU, Tollgate / bare; time "
                        "waiting (wall less CPU), Tollgate / bare",
                        f"CPU {_ms(read_cpu):.1f} ms / {_ms(bare_cpu):.1f} ms = {_ms(read_cpu) / _ms(bare_cpu):.2f}; "
                        f"waiting {_ms(read_wait):.1f} ms / {_ms(bare_wait):.1f} ms", "-", None))
        rows.append(_floor("P1", "a governed read turn", read_cpu, "the bare turn's", b))

        writer = _runner(db, env, saver, CyclicModel(call=_task_call))

        async def write_and_approve() -> None:
            await _write_and_approve(writer, ctx, "p2-")

        a, b = await compare(write_and_approve, bare_turn, rounds, warmup)
        rows.append(Row("P2", "write turn + approval resume / one bare turn (the old row, for comparison)",
                        f"{a * 1e3:.1f} ms / {b * 1e3:.1f} ms = {a / b:.2f}", "≤ 1.5", a / b <= 1.5))

        approving = _bare_approving_agent(db, saver, owner)

        async def bare_write_and_approve() -> None:
            await _bare_write_and_resume(approving)

        a, b, (ours_cpu, _), (anchor_cpu, _) = await _compare_counted(write_and_approve, bare_write_and_approve,
                                                                      rounds, warmup)
        rows.append(Row("P2", "write turn + approval resume / bare create_agent with HumanInTheLoopMiddleware, same "
                        "write and resume", f"{a * 1e3:.1f} ms / {b * 1e3:.1f} ms = {a / b:.2f}", "≤ 1.1", a / b <= 1.1))
        # Where the gap is: this process's CPU (the graph, the governance, psycopg); the rest is
        # the database's time, which P6's round trips speak to.
        ours_ms, anchor_ms = (sum(c) / len(c) * 1e3 for c in (ours_cpu, anchor_cpu))
        rows.append(Row("P2", "CPU per write turn + approval resume in this process: Tollgate / the anchor (the same "
                        "rounds)", f"{ours_ms:.1f} ms / {anchor_ms:.1f} ms = {ours_ms / anchor_ms:.2f}", "-", None))
        rows.append(_floor("P2", "a write turn + approval resume", ours_cpu, "the anchor's", b))

        # P4: a long thread vs a first turn, and bytes per thread as it grows. Pruning is off here:
        # it runs on about 1 turn in N chosen by the turn id's hash, so with it the per-turn bytes
        # of a short thread jump by chance; without it they show the worst case, deterministically.
        grower = _runner(db, env, saver, CyclicModel(call=_read_call), prune=False)
        marks = (5, 15) if smoke else (10, 100, 1000)
        long_thread = "p4-" + uuid.uuid4().hex
        done_turns = 0
        sizes: list[str] = []
        for mark in marks:
            while done_turns < mark:
                await grower.send(ctx, long_thread, "what's on my calendar today?")
                done_turns += 1
            total = await _thread_bytes(db, long_thread)
            sizes.append(f"{mark}: {total / mark / 1024:.1f} KiB/turn")

        # The latency of a long thread as it runs in production: pruned (as about 1 turn in 25 does).
        await saver.aprune([long_thread], strategy="keep_latest")

        async def long_turn() -> None:
            await ours.send(ctx, long_thread, "what's on my calendar today?")

        a, b = await compare(long_turn, governed_read, max(3, rounds // 2), warmup)
        rows.append(Row("P4", f"turn after {marks[-1]} prior turns / first turn", f"{a / b:.2f}", "≤ 1.2", a / b <= 1.2))
        # Linear growth (or better): bytes per turn do not grow with the thread (a quadratic thread's would).
        per_turn = [float(s.split(": ")[1].split()[0]) for s in sizes]
        linear = per_turn[-1] <= 1.5 * per_turn[0]
        rows.append(Row("P4", "bytes stored per thread, per turn", "; ".join(sizes), "flat (linear growth)", linear,
                        counted=True))
        bare_thread = "bare-long-" + uuid.uuid4().hex
        for _ in range(marks[0]):
            await bare.ainvoke({"messages": [HumanMessage("what's on my calendar today?")]},
                               {"configurable": {"thread_id": bare_thread}})
        bare_bytes = await _thread_bytes(db, bare_thread)
        rows.append(Row("P4", f"bare agent thread after {marks[0]} turns (for comparison)",
                        f"{bare_bytes / marks[0] / 1024:.1f} KiB/turn", "-", None))

        # P5: registry size.
        big = _runner(db, env, saver, CyclicModel(call=_read_call), _registry_of(1000))
        small = _runner(db, env, saver, CyclicModel(call=_read_call), _registry_of(20))

        async def big_turn() -> None:
            await big.send(ctx, "p5b-" + uuid.uuid4().hex, "what's on my calendar today?")

        async def small_turn() -> None:
            await small.send(ctx, "p5s-" + uuid.uuid4().hex, "what's on my calendar today?")

        a, b = await compare(big_turn, small_turn, rounds, warmup)
        rows.append(Row("P5", "turn with 1,000 registered actions / 20", f"{a / b:.2f}", "≤ 1.5", a / b <= 1.5))

    # P6: client round trips per turn, counted exactly on a traced pool (bench.roundtrips). The
    # occasional pruning of a thread's old checkpoints is counted apart (it is random per turn).
    n = 3 if smoke else 50
    async with open_counted_database(env.url) as (counted, trips):
        counted_saver = await open_checkpointer(counted, setup=False)
        reader = _runner(counted, env, counted_saver, CyclicModel(call=_read_call), prune=False)
        approver = _runner(counted, env, counted_saver, CyclicModel(call=_task_call), prune=False)

        async def counted_read() -> None:
            await _read(reader, ctx, "p6-")

        async def counted_write() -> None:
            await _write_and_approve(approver, ctx, "p6w-")

        ours = await _trips_per_run(trips, {"read": counted_read, "write": counted_write}, n)
        pruned = "p6p-" + uuid.uuid4().hex
        for _ in range(3):
            await reader.send(ctx, pruned, "what's on my calendar today?")
        await counted_saver.aprune([pruned], strategy="keep_latest")  # warm-up
        await reader.send(ctx, pruned, "what's on my calendar today?")
        with trips.window() as prune_total:
            await counted_saver.aprune([pruned], strategy="keep_latest")
    # The bare agents' round trips, on a pool of their own (the counts above are not disturbed).
    async with open_counted_database(env.url) as (counted, trips):
        counted_saver = await open_checkpointer(counted, setup=False)
        bare_agent = _bare_agent(counted, counted_saver, owner)
        anchor = _bare_approving_agent(counted, counted_saver, owner)

        async def bare_read() -> None:
            await _bare_read(bare_agent)

        async def anchor_write() -> None:
            await _bare_write_and_resume(anchor)

        theirs = await _trips_per_run(trips, {"read": bare_read, "write": anchor_write}, n)
    every = env.settings.checkpoint_prune_every
    amortized = prune_total[0] / max(every, 1)
    rows.append(Row("P6", "database round trips per read turn (counted on the wire; pruning apart, next row)",
                    f"{ours['read']:.1f} (with pruning amortized: {ours['read'] + amortized:.1f})",
                    # 8 before row-level security: scoping the tool's read to its owner costs its Sync (bench/README)
                    "≤ 9", ours["read"] <= 9, counted=True))
    rows.append(Row("P6", f"pruning a thread's old checkpoints (about 1 finished turn in {every})",
                    f"{prune_total[0]} round trips, {amortized:.2f} per turn amortized", "-", None))
    rows.append(Row("P6", "database round trips per write turn + approval resume (for comparison)",
                    f"{ours['write']:.1f}", "-", None))
    rows.append(Row("P6", "database round trips, bare create_agent (LangGraph's default durability): read turn; "
                    "P2's anchor, write + resume", f"{theirs['read']:.1f}; {theirs['write']:.1f}", "-", None))
    return rows


