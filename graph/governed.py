"""The compiled turn graph, which guards its own runs: every surface gets the same governed run.

:func:`graph.turn.build_graph` returns a :class:`GovernedGraph`, LangGraph's compiled graph with
the run's guards in its public entry points. ``ainvoke``, ``astream_events`` and the platform's
runs (``langgraph dev``, Studio, agent-chat-ui) all go through ``astream``, so the guards hold
whoever drives the graph, with or without Tollgate's runner in front:

* **One turn per thread.** A run holds its thread's lease (:mod:`graph.store.leases`) from before
  its first step until its last checkpoint is written; a run started where that thread's lease is
  already held (the runner, the workers) uses that one. Another holder is waited for up to
  ``thread_wait_seconds``, then the run is refused (``Unavailable``); another owner's thread is
  ``NotFound``. Every write of a run is fenced by the lease.
* **Run and inbox threads refuse chat** (:class:`~policies.errors.ThreadReadOnly`).
* **Routing and state edits come only from the graph.** A ``Command`` that routes (``goto``) or
  writes the state (``update``, ``graph``), and ``update_state`` in every form, are refused
  (``permission_denied``) and audited before anything is stored: the thread stays readable and
  its pending approval decidable. Resuming (``Command(resume=...)``) is the one way in.
* **Clean ends.** A run that does not end cleanly (cancelled, failed, closed early by its
  consumer) has its approvals brought back in line with its checkpoint and the effects ledger
  (:func:`graph.ledger.approvals.reconcile`) before its thread is freed; the run that takes over
  a thread whose holder died does that too, and closes the run the dead holder left open in the
  thread's event log.
* Synchronous runs are refused: they would hold no lease.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from tollgate.graph.ledger import approvals, effects
from tollgate.graph.ledger.event_log import close_abandoned
from tollgate.graph.ledger.audit import AuditRecord, append_audit
from tollgate.graph.observe import scope as observe_scope
from tollgate.graph.observe import tracing
from tollgate.graph.services import Services, ServicesProvider
from tollgate.graph.state import Context, Pending, Plan
from tollgate.graph.store import leases
from tollgate.graph.store.checkpoint_guard import CheckpointRefused
from tollgate.graph.threads import thread_kind
from tollgate.policies.errors import InvalidArgs, NotFound, PermissionDenied, ThreadReadOnly
from tollgate.policies.hitl import ApprovalRequest

__all__ = ["GovernedGraph", "ResumeCheck", "Waiting", "chat_refused"]


@dataclass(frozen=True, slots=True)
class Waiting:
    """What a thread's latest checkpoint waits on: the request, and the plan and lists it was made from."""

    request: ApprovalRequest
    plans: list[Plan]
    pending: Pending
    ids: dict[str, Any]
    """The thread's recent lists and known ids (what an edit may bind)."""


def chat_refused(thread_id: str, channel: str) -> ThreadReadOnly | None:
    """Why a new message on ``thread_id`` from ``channel`` is refused, if it is: the inbox is the
    server's, and a run's thread takes messages from its background run only."""
    kind = thread_kind(thread_id)
    if kind == "inbox" or (kind == "run" and channel != "background"):
        return ThreadReadOnly(thread_id, kind)
    return None


def _routes(command: Command[Any]) -> bool:
    """Whether ``command`` routes or writes the state (anything but a plain resume)."""
    return bool(command.goto) or command.update is not None or command.graph is not None


ResumeCheck = Callable[[Services, Context, str, Waiting, Any], list[Any]]
"""Checks a resume value against what the thread waits on (the approval node's own check,
:func:`nodes.approval.check_resume`); raises a typed error when it is refused."""


class GovernedGraph(CompiledStateGraph[Any, Context, Any, Any]):
    """The turn graph; its runs hold their thread, and routing and state edits from outside are refused.

    ``services`` is the provider the nodes use; ``check_resume`` is the approval node's check of a
    resume, which the runner applies before it resumes. Built by :func:`graph.turn.build_graph`; a
    copy (``copy``, ``with_config``, the platform attaching its checkpointer) keeps the guards.
    """

    def __init__(self, *, services: ServicesProvider, check_resume: ResumeCheck, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.services = services
        self.check_resume = check_resume

    @classmethod
    def of(cls, compiled: CompiledStateGraph[Any, Any, Any, Any], services: ServicesProvider,
           check_resume: ResumeCheck) -> GovernedGraph:
        """``compiled`` with the guards (built from its attributes, as ``Pregel.copy`` builds a copy)."""
        attrs = {k: v for k, v in vars(compiled).items() if k != "__orig_class__"}
        return cls(services=services, check_resume=check_resume, **attrs)

    # --- what a thread waits on, and bringing it back in line --------------------------------

    async def waiting(self, thread_id: str) -> Waiting | None:
        """The approval request the thread's latest checkpoint is interrupted on, if any."""
        snapshot = await self.aget_state({"configurable": {"thread_id": thread_id}})
        request = approvals.requested(snapshot)
        values = snapshot.values or {}
        plans, pending = values.get("plans"), values.get("pending")
        if request is None or not plans or pending is None:
            return None
        return Waiting(request=request, plans=plans, pending=pending,
                       ids={"recent": values.get("recent") or {}, "known": values.get("known") or {}})

    async def reconcile(self, thread_id: str, owner_id: str) -> list[approvals.Closed]:
        """Bring the approvals of ``owner_id``'s thread in line with its checkpoint and ledger.

        Called under the thread's lease (its writes are fenced by it)."""
        services = await self.services()
        waiting = await self.waiting(thread_id)
        return await approvals.reconcile(
            services.db.pool, thread_id, owner_id, waiting.request["approval"]["id"] if waiting else None,
            settle=lambda keys: effects.settle_intents(services, owner_id, keys),
        )

    async def take_over(self, thread_id: str, owner_id: str) -> list[approvals.Closed]:
        """What the holder that took ``thread_id`` from a dead one does first: reconcile its approvals,
        and close the run its event log left open (:mod:`graph.ledger.event_log`)."""
        closed = await self.reconcile(thread_id, owner_id)
        await close_abandoned((await self.services()).db.pool, thread_id, owner_id)
        return closed

    # --- holding the thread -------------------------------------------------------------------

    @asynccontextmanager
    async def hold(self, ctx: Context, thread_id: str, *, must_exist: bool = False) -> AsyncIterator[leases.Lease]:
        """Hold ``thread_id`` for a turn of ``ctx``'s owner, as the current lease.

        The lease already held for this thread in this context is used as it is; otherwise one is
        taken (waiting for another holder, up to ``thread_wait_seconds``) with the thread's owner
        read in the same statement: another owner's thread (or a missing one, with
        ``must_exist``) is ``NotFound``. A thread taken over from a holder that ran out of time is
        brought back in line first (:meth:`take_over`).
        """
        held = leases.current()
        if held is not None and held.thread_id == thread_id:
            yield held
            return
        services = await self.services()
        async with leases.shared(services.db.pool, services.settings).hold(thread_id) as lease:
            if (lease.owner_id is None and must_exist) or (lease.owner_id not in (None, ctx.owner_id)):
                raise NotFound("thread", thread_id)  # another owner's thread is indistinguishable from none
            if lease.stale:
                await self.take_over(thread_id, ctx.owner_id)
            yield lease

    # --- runs ---------------------------------------------------------------------------------

    async def astream(  # type: ignore[override]
        self, input: Any, config: RunnableConfig | None = None, *, context: Any = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """LangGraph's ``astream``, holding the thread and refusing what does not come from the graph.

        Refused before anything runs or is stored: a config without a thread (``InvalidArgs``), a
        context without a valid owner (``InvalidArgs``), a ``Command`` that routes or writes the
        state (``PermissionDenied``, audited), a new message on a run or inbox thread from chat
        (``ThreadReadOnly``), another owner's thread (``NotFound``).
        """
        thread_id = str(((config or {}).get("configurable") or {}).get("thread_id") or "")
        if not thread_id:
            raise InvalidArgs("graph run", ["config.configurable.thread_id is required"])
        ctx = _context(self.context_schema, context)
        if isinstance(input, Command):
            if _routes(input):
                await self._refuse(ctx.owner_id, thread_id, "forged_route", "routing or writing a turn's state "
                                   "from outside the graph; resume with Command(resume=...)")
        elif (refused := chat_refused(thread_id, ctx.channel)) is not None:
            raise refused
        with observe_scope.open_scope(observe_scope.Scope(owner=ctx.owner_id, thread=thread_id)) as found:
            span = tracing.turn(found, run="resume" if isinstance(input, Command) else "message")
            try:
                async with self.hold(ctx, thread_id, must_exist=isinstance(input, Command)):
                    try:
                        async for chunk in super().astream(input, config, context=ctx, **kwargs):
                            yield chunk
                    except CheckpointRefused:
                        raise  # nothing of the thread could be read, so nothing ran (audited once, by the saver)
                    except BaseException:
                        # Cancelled (client gone, shutdown), failed, or closed early by its consumer.
                        await leases.shielded(self.reconcile(thread_id, ctx.owner_id),
                                              what="reconciling a turn that did not end cleanly")
                        raise
            except BaseException as exc:
                span.end(exc)
                raise
            span.end(None)

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[Any]:  # type: ignore[override]
        """Refused: a turn runs asynchronously (``astream``, ``ainvoke``), where it holds its thread."""
        raise PermissionDenied("graph.stream", "a turn runs asynchronously (astream or ainvoke), holding its thread")

    # --- state edits --------------------------------------------------------------------------

    async def aupdate_state(self, config: RunnableConfig, values: Any, as_node: str | None = None,
                            task_id: str | None = None) -> RunnableConfig:
        """Refused and audited: a turn's state is written by its own nodes only."""
        await self._refuse(None, _thread_of(config), "state_edit", "editing a turn's state from outside the graph")
        raise AssertionError("unreachable")

    async def abulk_update_state(self, config: RunnableConfig, supersteps: Any) -> RunnableConfig:
        """Refused and audited, as :meth:`aupdate_state`."""
        await self._refuse(None, _thread_of(config), "state_edit", "editing a turn's state from outside the graph")
        raise AssertionError("unreachable")

    def update_state(self, config: RunnableConfig, values: Any, as_node: str | None = None,
                     task_id: str | None = None) -> RunnableConfig:
        """Refused: a turn's state is written by its own nodes only."""
        raise PermissionDenied("update_state", "editing a turn's state from outside the graph")

    def bulk_update_state(self, config: RunnableConfig, supersteps: Any) -> RunnableConfig:
        """Refused, as :meth:`update_state`."""
        raise PermissionDenied("update_state", "editing a turn's state from outside the graph")

    async def _refuse(self, owner_id: str | None, thread_id: str, reason: str, why: str) -> None:
        """Audit the refusal (owner: the run's, else the thread's), then raise it."""
        services = await self.services()
        if owner_id is None:
            async with services.db.pool.connection() as conn:
                cur = await conn.execute("SELECT owner_id FROM threads WHERE thread_id = %s", (thread_id,))
                row = await cur.fetchone()
            owner_id = str(row["owner_id"]) if row is not None else ""
        record = AuditRecord(owner_id=owner_id, stage="graph", decision="refuse", reason=reason,
                             code="permission_denied", thread_id=thread_id[:200])
        await append_audit(services.db.pool, record, now=services.clock())
        raise PermissionDenied("graph input", why)


def _thread_of(config: RunnableConfig) -> str:
    return str(((config or {}).get("configurable") or {}).get("thread_id") or "")


def _context(schema: type[Context], value: Any) -> Context:
    """The run context as ``schema`` (a mapping, as the platform passes it, keeps only its fields)."""
    if isinstance(value, Context):
        return value
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise InvalidArgs("graph run", ["context must be an object naming the owner"])
    names = {f.name for f in dataclasses.fields(schema)}
    try:
        return schema(**{k: v for k, v in value.items() if k in names})
    except (TypeError, ValueError) as exc:
        raise InvalidArgs("graph run", [f"context: {str(exc)[:200]}"]) from None
