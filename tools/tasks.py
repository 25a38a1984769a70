"""The tasks tool: a to-do list to list, add to and tick off.

Completing a task is soft and reversible: ``status = 'done'`` plus ``completed_at``; the row
stays.
"""

from __future__ import annotations

from typing import Any, Final

from tollgate.policies.errors import NotFound
from tollgate.tools._ids import new_id
from tollgate.tools._render import (
    clip,
    count_summary,
    fetch_all,
    fetch_one,
    fmt_day,
    list_result,
    load_owned,
    local,
    quoted,
    render_list,
    render_summary,
    write_result,
)
from tollgate.tools.args import TaskCompleteArgs, TaskCreateArgs, TaskListArgs
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, ResultRow, ToolSpec

__all__ = ["TASKS", "complete_task", "create_task", "list_tasks", "preview_complete", "preview_create_task"]

_TOOL: Final = "tasks"
_KIND: Final = "task"
_COLUMNS: Final = "id, title, due_date, status, created_at, completed_at"


def _label(row: dict[str, Any]) -> str:
    text = clip(row["title"])
    if row["due_date"] is not None:
        text += f" — due {fmt_day(row['due_date'])}"
    return text + (" — done" if row["status"] == "done" else "")


async def list_tasks(ctx: ExecContext, args: TaskListArgs) -> ActionResult:
    """Open, overdue (open and due before the owner's today), done or all tasks: open ones first,
    soonest due first, undated last."""
    where, params = "", [ctx.owner_id]
    if args.status == "overdue":
        where, params = " AND status = 'open' AND due_date < %s", [*params, local(ctx.now, ctx.timezone).date()]
    elif args.status != "all":
        where, params = " AND status = %s", [*params, args.status]
    rows = await fetch_all(
        ctx,
        f"SELECT {_COLUMNS} FROM tasks WHERE owner_id = %s{where}"
        " ORDER BY status = 'done', due_date NULLS LAST, created_at, id LIMIT %s",
        [*params, args.limit + 1],
    )
    noun = {"open": "open task", "overdue": "overdue task", "done": "done task", "all": "task"}[args.status]
    shown, summary = count_summary(rows, args.limit, noun)
    result_rows: list[ResultRow] = [{"id": r["id"], "label": _label(r)} for r in shown]
    return list_result(_TOOL, "list", "tasks", result_rows, summary)


def _describe(title: str, due: Any) -> str:
    return quoted(title) + (f", due {fmt_day(due)}" if due is not None else "")


async def preview_create_task(ctx: ExecContext, args: TaskCreateArgs) -> str:
    """``Add the task “Buy milk”, due Tue 1 Dec``."""
    return f"Add the task {_describe(args.title, args.due_date)}"


async def create_task(ctx: ExecContext, args: TaskCreateArgs) -> ActionResult:
    """Insert an open task."""
    row = await fetch_one(
        ctx,
        f"INSERT INTO tasks (id, owner_id, title, due_date, created_at) VALUES (%s, %s, %s, %s, %s)"
        f" RETURNING {_COLUMNS}",
        (new_id("tsk"), ctx.owner_id, args.title, args.due_date, ctx.now),
    )
    assert row is not None  # INSERT ... RETURNING always yields the row
    return write_result(_TOOL, "create", row, 1, f"Added the task {_describe(row['title'], row['due_date'])}.")


async def _load(ctx: ExecContext, task_id: str, *, lock: bool = False) -> dict[str, Any]:
    return await load_owned(ctx, "tasks", _COLUMNS, _KIND, task_id, lock=lock)


async def preview_complete(ctx: ExecContext, args: TaskCompleteArgs) -> str:
    """``Mark “Buy milk” (due Tue 1 Dec) as done``."""
    row = await _load(ctx, args.task_id)
    due = f" (due {fmt_day(row['due_date'])})" if row["due_date"] is not None else ""
    text = f"Mark {quoted(row['title'])}{due} as done"
    return text + (" (it is already done: approving changes nothing)" if row["status"] == "done" else "")


async def complete_task(ctx: ExecContext, args: TaskCompleteArgs) -> ActionResult:
    """Mark a task done (kept, reversible); a task already done is left as it is."""
    row = await _load(ctx, args.task_id, lock=True)
    if row["status"] == "done":
        return write_result(_TOOL, "complete", row, 0, f"{quoted(row['title'])} was already done; nothing changed.")
    updated = await fetch_one(
        ctx,
        f"UPDATE tasks SET status = 'done', completed_at = %s WHERE owner_id = %s AND id = %s AND status = 'open'"
        f" RETURNING {_COLUMNS}",
        (ctx.now, ctx.owner_id, row["id"]),
    )
    if updated is None:
        raise NotFound(_KIND, args.task_id)
    return write_result(_TOOL, "complete", updated, 1, f"Marked {quoted(updated['title'])} as done.")


TASKS = ToolSpec(
    database=True,
    name=_TOOL,
    description="Your to-do list.",
    capability_phrase="keep your to-do list",
    actions=(
        ActionSpec(
            name="list",
            description="List your open, done or all tasks.",
            args=TaskListArgs,
            tier="allowlist",
            executor=list_tasks,
            renderer=render_list,
            usage_examples=("What's on my to-do list?", "Show my open tasks", "Which tasks have I finished?"),
        ),
        ActionSpec(
            name="create",
            description="Add a task, optionally with a due date (after your approval).",
            args=TaskCreateArgs,
            tier="confirmation",
            executor=create_task,
            renderer=render_summary,
            preview=preview_create_task,
            idempotent=False,
            effect="write",
            usage_examples=(
                "Add 'buy milk' to my to-do list",
                "Put 'renew passport' on my to-do list",
                "New task: book flights to Lisbon, due Friday",
            ),
        ),
        ActionSpec(
            name="complete",
            description="Mark a task from the latest task list as done (reversible).",
            args=TaskCompleteArgs,
            tier="confirmation",
            executor=complete_task,
            renderer=render_summary,
            preview=preview_complete,
            id_fields={"task_id": "tasks"},
            effect="write",
            usage_examples=("I finished the report", "Tick off #2", "Mark the passport task as done"),
        ),
    ),
)
"""The tasks tool."""
