"""The long-task offer as a tool action that only the server can build.

When a chat turn spends its whole step budget on reads, :mod:`nodes.offer` proposes
``background.continue_in_background`` with server-bound arguments: the turn's own request
text, the thread it came from and a run key derived (HMAC) from thread and turn. The action is
tier ``mustlist``: never in the model's menu, refused by the tier gate if a model names it,
and an ``edit`` of its approval is refused too (the approval node only lets edits through for
``confirmation`` actions). Approving it queues the run; the key makes a replayed execute
step find the run it already queued instead of queueing a second.
"""

from __future__ import annotations

from typing import Final

from pydantic import Field

from tollgate.graph.background.queue import RUN_START, defer_run_job
from tollgate.graph.background.store import insert_run
from tollgate.policies.arguments import ArgsModel, SafeText
from tollgate.policies.errors import NotFound, Unavailable
from tollgate.tools._render import clip, quoted, render_summary, write_result
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, ToolSpec

__all__ = ["BACKGROUND", "CONTINUE_ACTION", "ContinueArgs", "continue_in_background", "preview_continue"]

CONTINUE_ACTION: Final = "continue_in_background"
"""The offer's action name."""


class ContinueArgs(ArgsModel):
    """Server-bound arguments of the offer (never chosen by a model)."""

    request: SafeText(8000) = Field(description="The chat request to continue.")
    origin_thread: SafeText(300) = Field(description="The chat thread the result goes back to.")
    run_key: SafeText(64) = Field(description="The run's id, derived by the server from thread and turn.")


async def preview_continue(ctx: ExecContext, args: ContinueArgs) -> str:
    """``Continue “…” as a background run; its result will be posted to this conversation``."""
    return (
        f"That needs more steps than one chat turn allows. Continue {quoted(args.request, 120)} as a background "
        "run; its result will be posted to this conversation"
    )


async def continue_in_background(ctx: ExecContext, args: ContinueArgs) -> ActionResult:
    """Queue the run (once per key) in the execute step's transaction."""
    cur = await ctx.db.execute(
        "SELECT to_regclass('procrastinate_jobs') IS NOT NULL AS present,"
        " (SELECT owner_id FROM threads WHERE thread_id = %s) AS owner_id",
        (args.origin_thread,),
    )
    row = await cur.fetchone()
    if row is None or not row["present"]:
        raise Unavailable("background worker queue")
    if row["owner_id"] != ctx.owner_id:
        raise NotFound("thread", args.origin_thread)
    run = await insert_run(
        ctx.db,
        run_id=args.run_key,
        owner_id=ctx.owner_id,
        source="offer",
        title=clip(args.request, 120),
        instruction=args.request,
        timezone=ctx.timezone,
        origin_thread_id=args.origin_thread,
    )
    if run is not None:
        await defer_run_job(ctx.db, RUN_START, run_id=run.run_id, owner_id=ctx.owner_id)
    item = {"run_id": args.run_key, "thread_id": f"bg:{args.run_key}"}
    summary = (
        f"Queued a background run to continue {quoted(args.request, 120)}; "
        "its result will be posted to this conversation."
    )
    return write_result("background", CONTINUE_ACTION, item, 1 if run is not None else 0, summary)


BACKGROUND = ToolSpec(
    database=True,
    name="background",
    description="Background runs the server offers when a request outgrows one chat turn.",
    capability_phrase="continue long requests in the background when you agree",
    actions=(
        ActionSpec(
            name=CONTINUE_ACTION,
            description="Continue the current request as a background run (offered by the server only).",
            args=ContinueArgs,
            tier="mustlist",
            executor=continue_in_background,
            renderer=render_summary,
            preview=preview_continue,
            idempotent=True,
            usage_examples=(
                "Read all my unread mail and summarize each",
                "Go through every event this week and list what needs preparation",
                "Check all my reminders and tasks and tell me what is overdue",
            ),
        ),
    ),
)
"""The server-only background tool (the offer)."""
