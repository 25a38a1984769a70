"""P9: Tollgate scaled out, N ``tollgate serve`` processes on one database, against one process.

Each conversation makes a read turn, then a write turn whose approval it decides, as people
do; its requests go round-robin over the processes (the read to one, the write to the next,
the decision to the one after), so a turn proposed by one process is resumed by another, as
behind a load balancer. The model is :mod:`bench.model_server` (1 s per call). Every server
reaches PostgreSQL through :mod:`bench.relay`, which counts round trips, in both loads alike.

Rows: turns/s of N processes over 1 (a read turn and a write with its decision are two turns),
server CPU per turn, errors; the write ran exactly once for every approved conversation and
under its own owner (every task row is checked); and what the database does per turn: round
trips, transactions committed and WAL bytes (``pg_stat_wal``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.env import Env
from bench.latency import bench_owners, cpu_seconds, server_process
from bench.procs import ROOT, Child, free_port, started, tollgate_command
from bench.relay import CountingRelay, counting_relay
from bench.rows import Row
from bench.serving import sse_messages
from tollgate.graph._env import child_environment
from tollgate.graph.store.db import Database, open_database
from tollgate.graph.store.owner_scope import owner_transaction

__all__ = ["run_scaleout_benchmarks"]

_PER_OWNER = 10
_READ = "what's on my calendar today?"


@dataclass
class _Load:
    seconds: float = 0.0
    turns: int = 0
    errors: int = 0
    first_errors: list[str] = field(default_factory=list)
    executed: dict[str, str] = field(default_factory=dict)
    """Task title → its owner, for every write whose decision said it ran."""

    def add(self, other: _Load) -> None:
        self.seconds += other.seconds
        self.turns += other.turns
        self.errors += other.errors
        self.first_errors = (self.first_errors + other.first_errors)[:3]
        self.executed |= other.executed


class _Servers:
    """Clients of the running ``tollgate serve`` processes, taken in turn."""

    def __init__(self, sessions: list[aiohttp.ClientSession], tokens: dict[str, str]) -> None:
        self.sessions = sessions
        self.tokens = tokens

    async def _stream(self, session: aiohttp.ClientSession, path: str, owner: str, body: dict[str, Any]
                      ) -> dict[str, Any]:
        """The last event of the run a POST starts (``message_complete`` or ``approval_required``)."""
        headers = {"Authorization": f"Bearer {self.tokens[owner]}", "Accept": "text/event-stream"}
        last: dict[str, Any] = {}
        async with session.post(path, json=body, headers=headers) as response:
            if response.status != 200:
                raise RuntimeError(f"POST {path} answered {response.status}: {(await response.text())[:200]}")
            async for kind, data in sse_messages(response.content):
                if kind in ("message_complete", "approval_required"):
                    last = json.loads(data)
        return last

    async def conversation(self, i: int, owner: str, title: str, out: _Load) -> None:
        """A read turn, then a write turn and its approval, each request to the next process."""
        session = itertools.cycle(self.sessions[i % len(self.sessions):] + self.sessions[:i % len(self.sessions)])
        read = await self._stream(next(session), "/v1/chat", owner, {"message": _READ})
        if read.get("data", {}).get("outcome") != "read":
            raise RuntimeError(f"the read turn ended with {read.get('type')!r} {read.get('data')!r}")
        out.turns += 1
        thread = read["thread_id"]
        asked = await self._stream(next(session), "/v1/chat", owner,
                                   {"message": f"add a task to {title}", "thread_id": thread})
        if asked.get("type") != "approval_required":
            raise RuntimeError(f"the write turn ended with {asked.get('type')!r}")
        done = await self._stream(next(session), f"/v1/approvals/{asked['data']['approval_id']}/decision", owner,
                                  {"type": "approve"})
        if done.get("data", {}).get("outcome") != "executed":
            raise RuntimeError(f"the approved write ended with {done.get('data')!r}")
        out.turns += 1
        out.executed[title] = owner


async def _load(servers: _Servers, owners: list[str], conversations: int, spread: float, tag: str) -> _Load:
    out = _Load()

    async def one(i: int) -> None:
        await asyncio.sleep(spread * i / conversations)
        try:
            await servers.conversation(i, owners[i // _PER_OWNER], f"p9 {tag} {i}", out)
        except Exception as exc:  # noqa: BLE001 - counted: the goal is zero
            out.errors += 1
            if len(out.first_errors) < 3:
                out.first_errors.append(f"{type(exc).__name__}: {str(exc)[:160]}")

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(conversations)))
    out.seconds = time.perf_counter() - start
    return out


@dataclass
class _Database:
    """What the database did over a window (WAL bytes, commits, the relay's round trips), and how
    many turns found their thread still held by another turn (the servers' lease-wait metric)."""

    wal_bytes: int = 0
    commits: int = 0
    round_trips: int = 0
    lease_waits: int = 0

    def add(self, other: _Database) -> None:
        self.wal_bytes += other.wal_bytes
        self.commits += other.commits
        self.round_trips += other.round_trips
        self.lease_waits += other.lease_waits


async def _lease_waits(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url) as response:
        text = await response.text()
    return sum(int(sample.value) for family in text_string_to_metric_families(text)
               if family.name == "tollgate_lease_wait_seconds" for sample in family.samples
               if sample.name.endswith("_count"))


async def _counters(db: Database, relay: CountingRelay, session: aiohttp.ClientSession, metrics: list[str]) -> _Database:
    await asyncio.sleep(1.2)  # backends flush their statistics at most once a second
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT (SELECT wal_bytes FROM pg_stat_wal)::bigint AS wal,"
                                 " (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS commits")
        row = await cur.fetchone()
    assert row is not None
    waits = sum([await _lease_waits(session, url) for url in metrics])
    return _Database(wal_bytes=int(row["wal"]), commits=int(row["commits"]), round_trips=relay.round_trips,
                     lease_waits=waits)


def _delta(after: _Database, before: _Database) -> _Database:
    return _Database(after.wal_bytes - before.wal_bytes, after.commits - before.commits,
                     after.round_trips - before.round_trips, after.lease_waits - before.lease_waits)


async def _exactly_once(db: Database, owners: list[str], executed: dict[str, str]) -> tuple[int, int]:
    """(approved writes found exactly once under their owner, task rows that are not one of them).

    Each owner's rows are read as that owner (row-level security), so a write that landed under
    another owner shows up as a stray row there."""
    found: dict[tuple[str, str], int] = {}
    for owner in owners:
        async with owner_transaction(db.pool, owner) as conn:
            cur = await conn.execute("SELECT title, count(*) AS n FROM tasks WHERE title LIKE %s GROUP BY title",
                                     ("p9 %",))
            found |= {(owner, r["title"]): int(r["n"]) for r in await cur.fetchall()}
    once = sum(1 for title, owner in executed.items() if found.get((owner, title)) == 1)
    stray = sum(n for (owner, title), n in found.items()
                if not title.startswith("p9 warm") and (executed.get(title) != owner or n != 1))
    return once, stray


async def run_scaleout_benchmarks(env: Env, *, smoke: bool) -> list[Row]:
    """Run P9 and return its rows."""
    ttft = 0.05 if smoke else 1.0
    conversations = 8 if smoke else 200
    processes = 2
    spread = 3 * ttft
    model_port = free_port()
    logs = ROOT / "var" / "bench" / "logs"
    target = conninfo_to_dict(env.url)
    socket_path = f"{target['host']}/.s.PGSQL.{target.get('port') or 5432}"
    python = str(ROOT / ".venv" / "bin" / "python")
    async with AsyncExitStack() as stack:
        relay = await stack.enter_async_context(counting_relay(socket_path))
        relayed = env.settings.model_copy(update={"database_url": make_conninfo(env.url, host="127.0.0.1",
                                                                                port=relay.port)})
        server_env = child_environment(
            relayed, OPENAI_BASE_URL=f"http://127.0.0.1:{model_port}/v1", OPENAI_API_KEY="not-needed",
            TOLLGATE_PICKER_MODEL="bench-model", TOLLGATE_RATE_LIMIT_BURST="100000",
            TOLLGATE_RATE_LIMIT_PER_MINUTE="1000000",
        )
        model: Child = await stack.enter_async_context(started(
            [python, "-m", "bench.model_server", "--port", str(model_port), "--ttft", str(ttft)],
            child_environment(env.settings), logs / "p9-model.log"))
        ports = [free_port() for _ in range(processes)]
        metric_ports = [free_port() for _ in range(processes)]
        children: list[Child] = [await stack.enter_async_context(started(
            tollgate_command("serve", "--port", str(port), "--no-worker"),
            server_env | {"TOLLGATE_METRICS_PORT": str(metric_port)}, logs / f"p9-tollgate-{n}.log"))
            for n, (port, metric_port) in enumerate(zip(ports, metric_ports, strict=True))]
        metrics = [f"http://127.0.0.1:{port}/metrics" for port in metric_ports]
        db = await stack.enter_async_context(open_database(env.settings))
        owners, tokens = await bench_owners(db, "p9", conversations // _PER_OWNER + 1)
        await model.answering(f"http://127.0.0.1:{model_port}/ok")
        for child, port, url in zip(children, ports, metrics, strict=True):
            await child.answering(f"http://127.0.0.1:{port}/healthz")
            await child.answering(url)
        timeout = aiohttp.ClientTimeout(total=600)
        # The clients let an idle connection go after 3 s, before uvicorn's 5 s keep-alive closes
        # it: reusing one the server is closing at that instant is a reset (as a load balancer's
        # idle timeout must be shorter than its backends').
        sessions = [await stack.enter_async_context(aiohttp.ClientSession(
            f"http://127.0.0.1:{port}", connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=3.0),
            timeout=timeout)) for port in ports]
        scrape = await stack.enter_async_context(aiohttp.ClientSession(timeout=timeout))
        sides = {1: _Servers(sessions[:1], tokens), processes: _Servers(sessions, tokens)}
        pids = [server_process(child) for child in children]
        for count, side in sides.items():  # warm-up: imports, pools, prepared statements
            await _load(side, owners, _PER_OWNER, 0.0, f"warm{count}")
        loads = {count: _Load() for count in sides}
        dbs = {count: _Database() for count in sides}
        cpu = dict.fromkeys(sides, 0.0)
        for n, count in enumerate((1, processes, processes, 1)):  # drift weighs on both sides alike
            before, busy = await _counters(db, relay, scrape, metrics), sum(cpu_seconds(p) for p in pids)
            load = await _load(sides[count], owners, conversations, spread, f"{count}-{n}")
            cpu[count] += sum(cpu_seconds(p) for p in pids) - busy
            dbs[count].add(_delta(await _counters(db, relay, scrape, metrics), before))
            loads[count].add(load)
        executed = {title: owner for load in loads.values() for title, owner in load.executed.items()}
        once, stray = await _exactly_once(db, owners, executed)

    one, many = loads[1], loads[processes]
    ratio = (many.turns / many.seconds) / (one.turns / one.seconds) if one.turns and many.seconds else 0.0
    rows = [
        Row("P9", f"turns/s at {conversations} conversations (read, write, approval; round-robin): {processes} "
            f"`tollgate serve` processes on one database / 1", f"{many.turns / many.seconds:.1f}/s / "
            f"{one.turns / one.seconds:.1f}/s = {ratio:.2f}", "reported", None),
        Row("P9", f"server CPU per turn, all processes: {processes} processes / 1",
            f"{cpu[processes] / max(many.turns, 1) * 1e3:.1f} ms / {cpu[1] / max(one.turns, 1) * 1e3:.1f} ms", "-", None),
        Row("P9", f"failed conversations: {processes} processes (1 process)",
            f"{many.errors} of {many.errors + len(many.executed)} ({one.errors} of {one.errors + len(one.executed)})"
            + (f"; first: {'; '.join(many.first_errors + one.first_errors)}" if many.errors or one.errors else ""),
            "0", many.errors == 0 and one.errors == 0, counted=True),
        Row("P9", "approved writes that ran exactly once, under their own owner (task rows checked); stray rows",
            f"{once} / {len(executed)}; {stray} stray", "all; 0", once == len(executed) and stray == 0, counted=True),
    ]
    for count in sides:
        d, turns = dbs[count], max(loads[count].turns, 1)
        rows.append(Row("P9", f"database work per turn, {count} process{'es' if count > 1 else ''}: round trips "
                        "(at the relay), commits, WAL bytes (`pg_stat_wal`)",
                        f"{d.round_trips / turns:.1f} round trips, {d.commits / turns:.1f} commits, "
                        f"{d.wal_bytes / turns / 1024:.1f} KiB WAL; turns that found their thread still held: "
                        f"{d.lease_waits} of {loads[count].turns}", "-", None))
    return rows
