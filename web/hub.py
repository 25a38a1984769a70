"""Detached turn runs and the event log behind them: what makes a stream resumable.

A request does not run its turn inside its own response. :meth:`TurnHub.start` runs it as a
task of the server; the task records every event in ``turn_events`` *before* anyone can see
it, then wakes the followers. Every stream (the request's own, or a reconnect with
``Last-Event-ID``) is a follower of that log, so a client that drops mid-turn loses nothing:
the turn goes on, and reconnecting replays what came after the last id it saw. Events are
written in group commits (a run's events that arrive while its write is in flight go in its
next; runs that write at once share one statement), and the request's own stream takes them
from memory once written rather than reading them back.

A run ends with its terminal event (``message_complete`` or ``approval_required``), recorded
only once the runner is done with the run (the approval it asks for is stored by then), so a
client may act on the last event the moment it gets it. A run that fails after it started
streaming ends instead with a recorded ``error`` event whose data says ``fatal: true``.

Runs on one thread are serialized twice: in process by an :class:`asyncio.Lock` (so waiting
requests hold no database connection), and across processes by the runner's advisory lock.
Followers are woken in process; a turn run by another process is followed by polling.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Final

from graph.db import Database
from graph.events import TurnEvent
from policies.errors import TollgateError
from web import store
from web.coalesce import Coalescer

__all__ = ["FAILED_RUN_MESSAGE", "LiveRun", "TurnHub"]

_log = logging.getLogger("tollgate.web")
_POLL_SECONDS = 1.0
_LINGER_SECONDS = 0.1
"""How long an event may wait for others of its run to share its log write (see :class:`_Recorder`)."""
_SHUTDOWN_GRACE_SECONDS = 10.0

FAILED_RUN_MESSAGE: Final = "the turn failed before it completed"
"""The message of the ``error`` event that ends a failed run."""


@dataclass(eq=False)
class LiveRun:
    """One run in this process: its first event (or early failure), then its completion."""

    thread_id: str
    """The thread it runs on."""
    first: asyncio.Future[TurnEvent]
    """Resolves with the first event, or with the error raised before any event."""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the run has finished (all its events are recorded)."""
    last: TurnEvent | None = None
    """The last event recorded so far."""
    error: BaseException | None = None
    """Why it failed, when it failed after its first event."""
    recorded: list[TurnEvent] = field(default_factory=list)
    """Its events as recorded (JSON values, as the log returns them), in order: its own stream reads these."""


async def _wait(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` pass; whether it was set.

    ``asyncio.timeout`` rather than ``wait_for``: no task per wait (these run once per batch of
    every stream).
    """
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
        self._tasks: set[asyncio.Task[None]] = set()
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._signals: dict[str, asyncio.Event] = {}
        self.owned = store.OwnedThreads()
        """Threads known to be their owner's (the early ownership check of a request)."""
        self.log: Coalescer[store.EventsOf, list[TurnEvent]] = Coalescer(
            partial(store.record_events, db), name="turn-events"
        )
        """Appends a run's events to the log; runs that write at once share one statement."""

    async def start(self, owner_id: str, thread_id: str, events: AsyncIterator[TurnEvent]) -> tuple[LiveRun, TurnEvent]:
        """Run ``events`` detached; return once its first event is recorded.

        An error raised before the first event (not found, invalid, nothing pending...) is
        raised here, so the request can answer with a plain HTTP error instead of a stream.
        """
        loop = asyncio.get_running_loop()
        run = LiveRun(thread_id=thread_id, first=loop.create_future())
        run.first.add_done_callback(_retrieve)
        task = asyncio.create_task(self._drive(run, owner_id, events), name=f"turn:{thread_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        # A client that disconnects while waiting for the thread does not cancel its turn.
        first = await asyncio.shield(run.first)
        return run, first

    async def _drive(self, run: LiveRun, owner_id: str, events: AsyncIterator[TurnEvent]) -> None:
        lock = self._locks.get(run.thread_id)
        if lock is None:
            lock = self._locks[run.thread_id] = asyncio.Lock()
        recorder = _Recorder(self, run, owner_id)
        try:
            async with lock:
                held: TurnEvent | None = None
                try:
                    async for event in events:
                        recorder.check()
                        if held is not None:  # nothing follows a terminal event; keep it if it does
                            recorder.add(held)
                            held = None
                        if event["type"] in store.TERMINAL:
                            held = event  # recorded once the runner is done (see the module doc)
                        else:
                            recorder.add(event)
                finally:
                    close = getattr(events, "aclose", None)  # the runner's generator releases its locks
                    if close is not None:
                        await close()
                if held is not None:  # the runner is done (approval stored); the next run still waits
                    recorder.add(held)  # with whatever is still queued: one write fewer
                await recorder.drain()
            if not run.first.done():
                run.first.set_exception(RuntimeError("the run produced no events"))
        except asyncio.CancelledError:
            recorder.cancel()
            if not run.first.done():
                run.first.cancel()
            raise
        except Exception as exc:
            await recorder.settle()
            if not run.first.done():
                run.first.set_exception(exc)
            else:
                run.error = exc
                await self._record_failure(run, owner_id, exc)
        finally:
            run.done.set()
            self._notify(run.thread_id)

    def _recorded(self, run: LiveRun, recorded: list[TurnEvent]) -> None:
        """``recorded`` (as stored) is in the log: hand it to the run's stream and wake the followers."""
        run.recorded.extend(recorded)
        run.last = recorded[-1]
        if not run.first.done():
            run.first.set_result(recorded[0])
        self._notify(run.thread_id)

    async def _record(self, run: LiveRun, owner_id: str, event: TurnEvent) -> None:
        self._recorded(run, await self.log(store.EventsOf(owner_id, [event])))

    async def _record_failure(self, run: LiveRun, owner_id: str, exc: Exception) -> None:
        """End a run that failed mid-stream with a recorded, fatal ``error`` event."""
        code = exc.code if isinstance(exc, TollgateError) else "unavailable"
        _log.warning("a turn run failed mid-stream: %s (%s)", type(exc).__name__, code)
        assert run.last is not None
        event = TurnEvent(
            type="error", seq=run.last["seq"] + 1, turn_id=run.last["turn_id"], ts=datetime.now(UTC).isoformat(),
            data={"code": code, "message": FAILED_RUN_MESSAGE, "fatal": True}, thread_id=run.thread_id,
        )
        try:
            await self._record(run, owner_id, event)
        except Exception as again:  # the database may be what failed; followers then stop at their idle limit
            _log.warning("could not record a failed run's end: %s", type(again).__name__)

    def _notify(self, thread_id: str) -> None:
        signal = self._signals.pop(thread_id, None)
        if signal is not None:
            signal.set()

    def _signal(self, thread_id: str) -> asyncio.Event:
        signal = self._signals.get(thread_id)
        if signal is None:
            signal = self._signals[thread_id] = asyncio.Event()
        return signal

    def busy(self) -> bool:
        """Whether another run than the caller's is live or waiting in this process."""
        return len(self._tasks) > 1

    def running(self, thread_id: str) -> bool:
        """Whether a run on ``thread_id`` is live or waiting in this process."""
        return thread_id in self._locks and self._locks[thread_id].locked()

    async def follow(
        self, thread_id: str, turn_id: str, after_seq: int, *, run: LiveRun | None = None
    ) -> AsyncIterator[TurnEvent]:
        """Recorded events of a turn after ``after_seq``, then live ones.

        With ``run`` (the request's own stream): until that run's last event. Without (a
        reconnect): everything recorded after ``after_seq``; if the latest event does not end
        a run, the turn is in flight and is followed until it does, or until ``idle_seconds``
        pass without a new event (the client may reconnect again).
        """
        if run is not None:
            async for batch in self.follow_run(run, turn_id, after_seq):
                for event in batch:
                    yield event
            return
        idle = 0.0
        while True:
            signal = self._signal(thread_id)  # taken before reading, so no wake-up is missed
            finished = run is not None and run.done.is_set()  # likewise: read before the log
            batch = await store.events_after(self.db, thread_id, turn_id, after_seq)
            for event in batch:
                yield event
                after_seq = event["seq"]
                if run is not None and store.ends_run(event):
                    return
            if batch:
                idle = 0.0
            if run is None:
                latest = batch[-1] if batch else await store.latest_event(self.db, thread_id, turn_id)
                if latest is None or (store.ends_run(latest) and latest["seq"] <= after_seq):
                    return
            elif finished and not batch:
                return  # it finished without a last event it could record (the database failed)
            if not await _wait(signal, _POLL_SECONDS):
                if run is None and not self.running(thread_id):
                    idle += _POLL_SECONDS
                    if idle >= self.idle_seconds:
                        return

    async def follow_run(
        self, run: LiveRun, turn_id: str, after_seq: int, *, quiet_seconds: float | None = None
    ) -> AsyncIterator[list[TurnEvent]]:
        """A request's own stream, in batches: its run's events once recorded, read from memory.

        The same events the log holds (recorded first, then handed over), without a query per
        wake-up; events recorded together come as one batch (one write to the client). With
        ``quiet_seconds``, an empty batch comes after that long without events (a keep-alive).
        """
        read = 0
        quiet = 0.0
        wait = _POLL_SECONDS if quiet_seconds is None else min(_POLL_SECONDS, quiet_seconds)
        while True:
            signal = self._signal(run.thread_id)  # taken before reading, so no wake-up is missed
            finished = run.done.is_set()  # likewise: read before the events
            fresh = run.recorded[read:]
            read += len(fresh)
            batch: list[TurnEvent] = []
            for event in fresh:
                if event["turn_id"] != turn_id or event["seq"] <= after_seq:
                    continue
                batch.append(event)
                after_seq = event["seq"]
                if store.ends_run(event):
                    yield batch
                    return
            if batch:
                quiet = 0.0
                yield batch
            if finished and not fresh:
                return  # it finished without a last event it could record (the database failed)
            if not await _wait(signal, wait) and quiet_seconds is not None:
                quiet += wait
                if quiet >= quiet_seconds:
                    quiet = 0.0
                    yield []

    async def close(self) -> None:
        """Let live runs finish for a short grace period, then cancel them."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=_SHUTDOWN_GRACE_SECONDS)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)


class _Recorder:
    """Group commit of one run's events: what arrives while a write is in flight, or within
    ``linger`` seconds of the previous write, goes in the next one.

    What is queued when the run ends is written at once. Other events wait up to ``linger`` for
    company, except the run's first when no other run is live in this process: on a quiet
    server it goes at once, and the response starts with it. A busy server trades that first
    event's head start for throughput, as PostgreSQL's ``commit_delay`` waits only when
    ``commit_siblings`` transactions are active: each write is a statement and a commit, and a
    write to every follower's socket, and under load a run's events come tens of milliseconds
    apart. With 16 runs at once (``python -m bench --only P3``) a run made one write instead of
    two, and the server spent 0.5-0.8 ms less CPU per turn. 100 ms is about the delay people
    still perceive as immediate; a model's tokens stream ten times a second.

    The turn does not wait for its events to be written, and followers are woken once per write.
    An event is still visible only once it is in the log.
    """

    def __init__(self, hub: TurnHub, run: LiveRun, owner_id: str, *, linger: float = _LINGER_SECONDS) -> None:
        self.hub = hub
        self.run = run
        self.owner_id = owner_id
        self.linger = linger
        self.pending: list[TurnEvent] = []
        self.task: asyncio.Task[None] | None = None
        self.error: Exception | None = None
        self.urgent = asyncio.Event()
        self.started = False
        """Whether the run's first event has been queued."""
        self.closing = False
        """Set when the run is over: what is queued is written without lingering."""

    def add(self, event: TurnEvent) -> None:
        """Queue ``event`` for the log (after every event queued before it)."""
        self.pending.append(event)
        if not self.started:
            self.started = True
            if not self.hub.busy():  # a quiet server: the first event goes at once
                self.urgent.set()
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._write(), name=f"turn-events:{self.run.thread_id}")

    async def _write(self) -> None:
        while self.pending and self.error is None:
            if not self.urgent.is_set():
                # A timer that sets the flag rather than a timeout around the wait: lingering
                # usually runs its full time, and a timeout that expires raises (twice) to say so.
                timer = asyncio.get_running_loop().call_later(self.linger, self.urgent.set)
                try:
                    await self.urgent.wait()
                finally:
                    timer.cancel()
            batch, self.pending = self.pending, []
            try:
                recorded = await self.hub.log(store.EventsOf(self.owner_id, batch))
            except Exception as exc:  # surfaced to the run by check() or drain()
                self.error = exc
                return
            self.hub._recorded(self.run, recorded)
            if not self.closing:
                self.urgent.clear()

    def check(self) -> None:
        """Raise the error of a failed write, if one failed."""
        if self.error is not None:
            raise self.error

    async def drain(self) -> None:
        """Write everything queued now, without lingering; raise if a write failed."""
        self.closing = True
        self.urgent.set()
        while self.task is not None and not self.task.done():
            await asyncio.shield(self.task)
        self.check()

    async def settle(self) -> None:
        """Wait for the write in flight (a failed run then records its end after it); never raise."""
        self.closing = True
        self.urgent.set()
        if self.task is not None and not self.task.done():
            await asyncio.wait([self.task])

    def cancel(self) -> None:
        """Stop writing (the run was cancelled)."""
        if self.task is not None:
            self.task.cancel()
