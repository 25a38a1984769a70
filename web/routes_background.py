"""``/v1/background-runs``: create, list, read (with the event ledger) and cancel background runs.

Owner-scoped like every route: another owner's run answers 404. The work happens on workers
(``tollgate worker``, or the one ``make run`` starts); these routes only queue and read.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from tollgate.graph.background import api
from tollgate.graph.background.store import BackgroundRun, RunSource, RunStatus
from tollgate.web.deps import PrincipalDep
from tollgate.web.errors import documented
from tollgate.web.schemas import THREAD_ID_PATTERN, Message

__all__ = ["RUN_ID_PATTERN", "RunCreate", "RunDetailOut", "RunEventOut", "RunOut", "RunsOut", "router"]

RUN_ID_PATTERN = r"^run_[0-9a-f]{32}$"
"""Background run ids."""

router = APIRouter(prefix="/v1/background-runs", tags=["background runs"])
Instruction = Message
"""A run's instruction: the rules of a chat message."""


class RunCreate(BaseModel):
    """A run to queue."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instruction: Instruction
    """What the run should do, as a chat request (the rules of a chat message)."""
    thread_id: Annotated[str, StringConstraints(pattern=THREAD_ID_PATTERN)] | None = None
    """The caller's chat thread the result goes to (default: the caller's notice thread)."""


class RunOut(BaseModel):
    """A background run."""

    run_id: str
    status: RunStatus
    source: RunSource
    title: str
    instruction: str
    thread_id: str = Field(description="The run's own thread (`bg:<run_id>`).")
    origin_thread_id: str = Field(description="Where the result is delivered.")
    trigger_id: str | None
    approval_id: str | None = Field(description="The approval it waits on, when `awaiting_approval`.")
    cancel_requested: bool
    pause_requested: bool
    attempts: int
    reply: str | None
    outcome: str | None
    error_code: str | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime

    @classmethod
    def of(cls, run: BackgroundRun | dict[str, Any]) -> RunOut:
        """From a stored run (or its wire dict)."""
        data = run.to_dict() if isinstance(run, BackgroundRun) else run
        return cls.model_validate({k: v for k, v in data.items() if k in cls.model_fields})


class RunEventOut(BaseModel):
    """One entry of a run's ledger: a lifecycle step, or a turn event (``kind = 'turn'``)."""

    kind: str
    attempt: int
    turn_id: str | None
    seq: int | None
    data: dict[str, Any]
    at: datetime


class RunDetailOut(RunOut):
    """A run with its event ledger, oldest first."""

    events: list[RunEventOut]


class RunsOut(BaseModel):
    """The caller's runs, newest first."""

    runs: list[RunOut]


RunId = Annotated[str, Path(pattern=RUN_ID_PATTERN)]


@router.post("", status_code=202, summary="Queue a background run", responses=documented(401, 404, 422, 429, 503))
async def create(body: RunCreate, principal: PrincipalDep) -> RunOut:
    """Queue a run of ``instruction``; a worker runs it as the caller, results go to ``thread_id``."""
    run = await api.create_run(principal.app, principal.context, body.instruction, origin_thread_id=body.thread_id)
    return RunOut.of(run)


@router.get("", summary="List the caller's background runs", responses=documented(401, 422, 429, 503))
async def list_runs(
    principal: PrincipalDep,
    status: Annotated[RunStatus | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> RunsOut:
    """Newest first, optionally of one status."""
    return RunsOut(runs=[RunOut.of(r) for r in await api.list_runs(principal.app, principal.context, status=status, limit=limit)])


@router.get("/{run_id}", summary="A background run with its event ledger", responses=documented(401, 404, 429, 503))
async def get_run(run_id: RunId, principal: PrincipalDep) -> RunDetailOut:
    """The run and everything recorded about it."""
    detail = await api.get_run(principal.app, principal.context, run_id)
    return RunDetailOut.model_validate({k: v for k, v in detail.items() if k in RunDetailOut.model_fields})


@router.post("/{run_id}/cancel", summary="Cancel a background run", responses=documented(401, 404, 429, 503))
async def cancel(run_id: RunId, principal: PrincipalDep) -> RunOut:
    """Queued, paused or waiting runs stop at once; a running one at its next step (``cancel_requested``)."""
    return RunOut.of(await api.cancel_run(principal.app, principal.context, run_id))


@router.post("/{run_id}/pause", summary="Pause a background run", responses=documented(401, 404, 429, 503))
async def pause(run_id: RunId, principal: PrincipalDep) -> RunOut:
    """A queued run pauses at once; a running one at its next step (``pause_requested``). Others stay as they are."""
    return RunOut.of(await api.pause_run(principal.app, principal.context, run_id))


@router.post("/{run_id}/resume", summary="Resume a paused background run", responses=documented(401, 404, 429, 503))
async def resume(run_id: RunId, principal: PrincipalDep) -> RunOut:
    """A paused run is queued again (its turn starts over); others stay as they are."""
    return RunOut.of(await api.unpause_run(principal.app, principal.context, run_id))
