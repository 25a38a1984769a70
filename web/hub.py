"""Detached turn runs and the event log behind them: what makes a stream resumable.

A request does not run its turn inside its own response. :meth:`TurnHub.start` runs it as a
task of the server; the task records every event in ``turn_events`` *before* anyone can see it,
then wakes the followers. Every stream (the request's own, or a reconnect with
``Last-Event-ID``) follows that log, so a client that drops mid-turn loses nothing: the turn
goes on, and reconnecting replays what came after the last id it saw. The SSE id of an event is
its id in the log, global and increasing, so ``Last-Event-ID`` alone says where a client was,
whatever turn that was in.

A run's events are written by one writer in order: what arrives while a write is in flight goes
in the next one, and a streamed answer's text deltas wait up to :data:`DELTA_SECONDS` after the
run's last write to go in with the ones after them (a model streams a chunk every few tens of
milliseconds; one write per chunk would be a commit per chunk). Any other event is written at
once, with everything queued before it. A run ends with its terminal event (``message_complete`` or
``approval_required``), recorded only once the runner is done with the run (its approval is
stored and its thread released by then), so a client may act on the last event the moment it
gets it. A run that fails after it started streaming ends instead with a recorded ``error``
event whose data says ``fatal: true``. Followers are woken in process; a turn run by another
process is followed by polling.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from psycopg import AsyncConnection, OperationalError

from tollgate.graph.events import TurnEvent
from tollgate.graph.store.db import Database
from tollgate.policies.errors import TollgateError
from tollgate.web import store

__all__ = ["DELTA_SECONDS", "FAILED_RUN_MESSAGE", "STOPPED_RUN_MESSAGE", "LiveRun", "TurnHub", "TurnStopped"]

_log = logging.getLogger("tollgate.web")
_POLL_SECONDS: Final = 1.0
DELTA_SECONDS: Final = 0.1
"""The longest a run's text deltas wait after its last write, to be written together: about ten
writes a second at most while a model streams, text reaching its reader a tenth of a second late at most."""
_DEFERRED: Final = frozenset({"token_delta", "reasoning_delta"})
"""The events that may wait (:data:`DELTA_SECONDS`); any other is written at once."""
_SHUTDOWN_GRACE_SECONDS: Final = 10.0
STOP_CHANNEL: Final = "tollgate_stop"
"""The PostgreSQL channel a stop is announced on (its payload: a request id and the thread id), so
the server process that runs the turn stops it, whichever process the owner asked."""
STOPPED_CHANNEL: Final = "tollgate_stopped"
"""Where a process that stopped a run announced on :data:`STOP_CHANNEL` says so (its payload: the request id)."""
_RELISTEN_SECONDS: Final = 1.0
_ACK_SECONDS: Final = 1.0  # how long a stop of a run not holding its thread waits to hear it was stopped

FAILED_RUN_MESSAGE: Final = "the turn failed before it completed"
"""The message of the ``error`` event that ends a failed run."""
STOPPED_RUN_MESSAGE: Final = "stopped at your request; what had already run stays done"
"""The message of the ``error`` event (code ``cancelled``) that ends a run its owner stopped."""


class TurnStopped(Exception):
    """The turn was stopped by its owner before it produced anything."""

    code: Final = "cancelled"

    def __init__(self) -> None:
        super().__init__(STOPPED_RUN_MESSAGE)


@dataclass(eq=False)
class LiveRun:
    """One run in this process: its first event (or early failure), then its completion."""

    thread_id: str
    """The thread it runs on."""
    first: asyncio.Future[TurnEvent]
    """Resolves with the first event as recorded, or with the error raised before any event."""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the run has finished (all its events are recorded)."""
    error: BaseException | None = None
    """Why it failed, when it failed after its first event."""
    recorded: list[TurnEvent] = field(default_factory=list)
    """Its events as recorded (with their log ``id``), in order."""
    stopped: bool = False
    """Its owner asked to stop it (:meth:`TurnHub.stop`)."""


async def _wait(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` pass; whether it was set."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True


def _retrieve(future: asyncio.Future[TurnEvent]) -> None:
    # The request that awaited it may be gone; mark the exception as seen either way.
    if not future.cancelled():
        future.exception()


class TurnHub:
    """Starts detached runs and serves followers of the event log."""

    def __init__(self, db: Database, *, idle_seconds: float) -> None:
        self.db = db
        self.idle_seconds = idle_seconds
        self._runs: dict[asyncio.Task[None], LiveRun] = {}  # the live tasks (kept referenced) and their runs
        self._live: Counter[str] = Counter()
        self._signals: dict[str, asyncio.Event] = {}
        self._listener: asyncio.Task[None] | None = None
        self._acks: dict[str, asyncio.Future[None]] = {}  # stops announced from here, waiting to be heard
        self._replies: set[asyncio.Task[None]] = set()
        self.owned = store.OwnedThreads()
        """Threads known to be their owner's (the early ownership check of a request)."""

    async def open(self) -> None:
        """Listen for stops announced by other server processes (:meth:`request_stop`), until :meth:`close`."""
        ready = asyncio.get_running_loop().create_future()
        self._listener = asyncio.create_task(self._listen(ready), name="turn-hub:stops")
        await ready

    async def _listen(self, ready: asyncio.Future[None]) -> None:
        # Its own connection, not the pool's: LISTEN holds the connection for the life of the server.
        while True:
            try:
                async with await AsyncConnection.connect(self.db.url, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {STOP_CHANNEL}")
                    await conn.execute(f"LISTEN {STOPPED_CHANNEL}")
                    if not ready.done():
                        ready.set_result(None)
                    async for notice in conn.notifies():
                        self._heard(notice.channel, notice.payload)
            except OperationalError as exc:
                _log.warning("listening for stops failed (%s); listening again", type(exc).__name__)
                if not ready.done():
                    ready.set_result(None)  # the server still starts: stops then reach this process only
                await asyncio.sleep(_RELISTEN_SECONDS)

    def _heard(self, channel: str, payload: str) -> None:
        """A stop announced by a process (stop the run if it is here, and say so), or a process saying it stopped one."""
        request, _, thread_id = payload.partition(" ")
        if channel == STOPPED_CHANNEL:
            ack = self._acks.get(payload)
            if ack is not None and not ack.done():
                ack.set_result(None)
        elif self.stop(thread_id):
            reply = asyncio.create_task(self._say_stopped(request), name="turn-hub:stopped")
            self._replies.add(reply)
            reply.add_done_callback(self._replies.discard)

    async def _say_stopped(self, request: str) -> None:
        try:
            async with self.db.pool.connection() as conn:
                await conn.execute("SELECT pg_notify(%s, %s)", (STOPPED_CHANNEL, request))
        except OperationalError as exc:  # the asking process then answers from the lease alone
            _log.warning("announcing a stop failed (%s)", type(exc).__name__)

    async def request_stop(self, thread_id: str, *, answer: bool = True) -> bool:
        """Stop the turn on ``thread_id`` wherever it runs; ``True`` if one was running.

        A run in this process stops at once; one in another server process stops when that process
        hears the announcement (a run of a background worker is not stopped: cancel the run instead).
        A run holding its thread's lease is running; one still waiting for a slot or for its thread
        holds no lease, so the answer waits a moment for the process that stopped it to say so
        (unless ``answer`` is false: a caller that does not report it, such as a thread's deletion).
        """
        if self.stop(thread_id):
            return True
        request = uuid.uuid4().hex
        ack = self._acks[request] = asyncio.get_running_loop().create_future()
        try:
            async with self.db.pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT pg_notify(%s, %s), EXISTS (SELECT 1 FROM thread_leases WHERE thread_id = %s"
                    " AND holder IS NOT NULL AND expires_at > clock_timestamp()) AS held",
                    (STOP_CHANNEL, f"{request} {thread_id}", thread_id),
                )
                row = await cur.fetchone()
            if row and row["held"]:
                return True
            if not answer:
                return False
            try:
                await asyncio.wait_for(asyncio.shield(ack), _ACK_SECONDS)
            except TimeoutError:
                return False
            return True
        finally:
            del self._acks[request]

    async def start(self, owner_id: str, thread_id: str, events: AsyncIterator[TurnEvent]) -> tuple[LiveRun, TurnEvent]:
        """Run ``events`` detached; return once its first event is recorded.

        An error raised before the first event (not found, invalid, nothing pending...) is
        raised here, so the request can answer with a plain HTTP error instead of a stream.
        """
        loop = asyncio.get_running_loop()
        run = LiveRun(thread_id=thread_id, first=loop.create_future())
        run.first.add_done_callback(_retrieve)
        task = asyncio.create_task(self._drive(run, owner_id, events), name=f"turn:{thread_id}")
        self._runs[task] = run
        task.add_done_callback(self._runs.pop)
        # A client that disconnects while waiting for the thread does not cancel its turn.
        first = await asyncio.shield(run.first)
        return run, first

    async def _drive(self, run: LiveRun, owner_id: str, events: AsyncIterator[TurnEvent]) -> None:
        self._live[run.thread_id] += 1
        writer = _Writer(self, run, owner_id)
        try:
            held: TurnEvent | None = None
            try:
                async for event in events:
                    writer.check()
                    if held is not None:  # nothing follows a terminal event; keep it if it does
                        writer.add(held)
                        held = None
                    if event["type"] in store.TERMINAL:
                        held = event  # recorded once the runner is done (see the module doc)
                    else:
                        writer.add(event)
            finally:
                close = getattr(events, "aclose", None)  # the runner's generator releases its thread
                if close is not None:
                    await close()
            if held is not None:
                writer.add(held)
            await writer.drain()
            if not run.first.done():
                run.first.set_exception(RuntimeError("the run produced no events"))
        except asyncio.CancelledError:
            if run.stopped and run.first.done() and run.recorded:
                # Stopped by its owner: the turn's own cancellation handling has run (the runner's
                # generator is closed above); end the stream with a recorded, honest last event.
                await writer.settle()
                await self._record_end(run, owner_id, "cancelled", STOPPED_RUN_MESSAGE)
                return
            writer.cancel()
            if not run.first.done():
                if run.stopped:  # before its first event: the request that started it answers 409 cancelled
                    run.first.set_exception(TurnStopped())
                    return
                run.first.cancel()
            raise
        except Exception as exc:
            await writer.settle()
            if not run.first.done():
                run.first.set_exception(exc)
            else:
                run.error = exc
                await self._record_failure(run, owner_id, exc)
        finally:
            self._live[run.thread_id] -= 1
            if self._live[run.thread_id] <= 0:
                del self._live[run.thread_id]
            run.done.set()
            self._notify(run.thread_id)

    def recorded(self, run: LiveRun, events: list[TurnEvent]) -> None:
        """``events`` (as stored, with ids) are in the log: hand them to the run's stream, wake followers."""
        run.recorded.extend(events)
        if not run.first.done():
            run.first.set_result(events[0])
        self._notify(run.thread_id)

    def stop(self, thread_id: str) -> bool:
        """Stop the runs of ``thread_id`` in this process (its owner pressed stop); ``True`` if one was running.

        The turn is cancelled as a client that goes away would cancel it (its thread freed, an
        effect either committed or not run), and its stream ends with an ``error`` event whose
        code is ``cancelled``. A run still waiting for its thread is cancelled before it starts.
        """
        found = False
        for task, run in list(self._runs.items()):
            if run.thread_id == thread_id and not task.done():
                run.stopped = True
                task.cancel()
                found = True
        return found

    async def _record_failure(self, run: LiveRun, owner_id: str, exc: Exception) -> None:
        """End a run that failed mid-stream with a recorded, fatal ``error`` event."""
        code = exc.code if isinstance(exc, TollgateError) else "unavailable"
        _log.warning("a turn run failed mid-stream: %s (%s)", type(exc).__name__, code)
        await self._record_end(run, owner_id, code, FAILED_RUN_MESSAGE)

    async def _record_end(self, run: LiveRun, owner_id: str, code: str, message: str) -> None:
        last = run.recorded[-1]
        event = TurnEvent(
            type="error", seq=last["seq"] + 1, turn_id=last["turn_id"], ts=datetime.now(UTC).isoformat(),
            data={"code": code, "message": message, "fatal": True}, thread_id=run.thread_id,
        )
        try:
            self.recorded(run, await store.record_events(self.db, owner_id, [event]))
        except Exception as again:  # the database may be what failed
            _log.warning("could not record a failed run's end: %s", type(again).__name__)
            # The run's own stream is told all the same, under the id of the last event the log
            # holds (this one is not in it); whoever takes the thread over closes the run in the
            # log (graph.ledger.event_log), so a client that reconnects hears the end too.
            self.recorded(run, [event | {"id": last["id"]}])

    def _notify(self, thread_id: str) -> None:
        signal = self._signals.pop(thread_id, None)
        if signal is not None:
            signal.set()

    def _signal(self, thread_id: str) -> asyncio.Event:
        signal = self._signals.get(thread_id)
        if signal is None:
            signal = self._signals[thread_id] = asyncio.Event()
        return signal

    def running(self, thread_id: str) -> bool:
        """Whether a run on ``thread_id`` is live or waiting in this process."""
        return self._live.get(thread_id, 0) > 0

    async def follow(self, thread_id: str, after_id: int, *, turn_id: str | None = None) -> AsyncIterator[TurnEvent]:
        """Recorded events of the thread after log id ``after_id`` (of one turn, with ``turn_id``), then live ones.

        Ends after the last event of the latest run once it is recorded; an unfinished run is
        followed until it ends, or until ``idle_seconds`` pass without a new event (the client
        may reconnect again).
        """
        idle = 0.0
        while True:
            signal = self._signal(thread_id)  # taken before reading, so no wake-up is missed
            batch = await store.events_after(self.db, thread_id, after_id, turn_id)
            for event in batch:
                yield event
                after_id = event["id"]
            if batch:
                idle = 0.0
            latest = batch[-1] if batch else await store.latest_event(self.db, thread_id, turn_id)
            if latest is None or (store.ends_run(latest) and latest["id"] <= after_id):
                return
            if not await _wait(signal, _POLL_SECONDS) and not self.running(thread_id):
                idle += _POLL_SECONDS
                if idle >= self.idle_seconds:
                    return

    async def follow_run(self, run: LiveRun, after_id: int) -> AsyncIterator[TurnEvent]:
        """A request's own stream: its run's events once recorded (read from memory), until the last."""
        read = 0
        while True:
            signal = self._signal(run.thread_id)  # taken before reading, so no wake-up is missed
            finished = run.done.is_set()  # likewise: read before the events
            fresh = run.recorded[read:]
            read += len(fresh)
            for event in fresh:
                if event["id"] <= after_id:
                    continue
                yield event
                if store.ends_run(event):
                    return
            if finished and not fresh:
                return  # it finished without a last event it could record (the database failed)
            await signal.wait()  # set by the run's next recorded events or its end

    async def close(self) -> None:
        """Stop listening; let live runs finish for a short grace period, then cancel them."""
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.wait([self._listener])
            self._listener = None
        if not self._runs:
            return
        _, pending = await asyncio.wait(set(self._runs), timeout=_SHUTDOWN_GRACE_SECONDS)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)


class _Writer:
    """Writes one run's events to the log in order: what arrives during a write goes in the next,
    and text deltas wait up to :data:`DELTA_SECONDS` after the last write for the ones after them.

    The turn does not wait for its events to be written; an event is visible only once it is
    in the log.
    """

    def __init__(self, hub: TurnHub, run: LiveRun, owner_id: str) -> None:
        self.hub = hub
        self.run = run
        self.owner_id = owner_id
        self.pending: list[TurnEvent] = []
        self.task: asyncio.Task[None] | None = None
        self.error: Exception | None = None
        self.urgent = asyncio.Event()
        """Set when what is queued must not wait (an event that is not a delta, or a drain)."""
        self.last_write = float("-inf")

    def add(self, event: TurnEvent) -> None:
        """Queue ``event`` for the log (after every event queued before it)."""
        self.pending.append(event)
        if event["type"] not in _DEFERRED:
            self.urgent.set()
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._write(), name=f"turn-events:{self.run.thread_id}")

    async def _write(self) -> None:
        loop = asyncio.get_running_loop()
        while self.pending and self.error is None:
            wait = self.last_write + DELTA_SECONDS - loop.time()
            if wait > 0 and not self.urgent.is_set():
                try:
                    await asyncio.wait_for(self.urgent.wait(), wait)
                except TimeoutError:
                    pass  # the deltas waited long enough
            self.urgent.clear()
            batch, self.pending = self.pending, []
            self.last_write = loop.time()
            try:
                recorded = await store.record_events(self.hub.db, self.owner_id, batch)
            except Exception as exc:  # surfaced to the run by check() or drain()
                self.error = exc
                return
            self.hub.recorded(self.run, recorded)

    def check(self) -> None:
        """Raise the error of a failed write, if one failed."""
        if self.error is not None:
            raise self.error

    async def drain(self) -> None:
        """Wait until everything queued is written (at once); raise if a write failed."""
        self.urgent.set()
        while self.task is not None and not self.task.done():
            await asyncio.shield(self.task)
        self.check()

    async def settle(self) -> None:
        """Wait for the write in flight (a failed run then records its end after it); never raise."""
        self.urgent.set()
        if self.task is not None and not self.task.done():
            await asyncio.wait([self.task])

    def cancel(self) -> None:
        """Stop writing (the run was cancelled)."""
        if self.task is not None:
            self.task.cancel()
