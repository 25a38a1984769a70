"""The notes tool: free-text notes to list, read, write, change and archive.

Archiving is soft and reversible (``status = 'archived'`` plus ``archived_at``); nothing is
deleted. Listing and reading run at once; writing, changing and archiving wait for approval.
"""

from __future__ import annotations

from typing import Any, Final

from tollgate.tools._ids import new_id
from tollgate.tools._render import (
    clip,
    count_summary,
    escape_like,
    fetch_all,
    fetch_one,
    item_result,
    list_result,
    load_owned,
    quoted,
    render_list,
    render_summary,
    write_result,
)
from tollgate.tools.args import NoteArchiveArgs, NoteCreateArgs, NoteListArgs, NoteReadArgs, NoteUpdateArgs
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, ResultRow, ToolSpec

__all__ = ["NOTES"]

_TOOL: Final = "notes"
_KIND: Final = "note"
_COLUMNS: Final = "id, title, body, status, created_at, updated_at, archived_at"
_ID: Final = {"note_id": "notes"}


def _label(row: dict[str, Any]) -> str:
    text = clip(row["title"])
    if row["body"]:
        text += " — " + clip(row["body"], 60)
    return text + (" — archived" if row["status"] == "archived" else "")


async def list_notes(ctx: ExecContext, args: NoteListArgs) -> ActionResult:
    """Active, archived or all notes, most recently changed first, optionally containing some text."""
    where, params = "", [ctx.owner_id]
    if args.status != "all":
        where += " AND status = %s"
        params.append(args.status)
    if args.contains:
        where += " AND (title ILIKE %s OR body ILIKE %s)"
        pattern = f"%{escape_like(args.contains)}%"
        params += [pattern, pattern]
    rows = await fetch_all(
        ctx, f"SELECT {_COLUMNS} FROM notes WHERE owner_id = %s{where} ORDER BY updated_at DESC, id LIMIT %s",
        [*params, args.limit + 1],
    )
    shown, summary = count_summary(rows, args.limit, {"active": "note", "archived": "archived note", "all": "note"}[args.status])
    result_rows: list[ResultRow] = [{"id": r["id"], "label": _label(r)} for r in shown]
    return list_result(_TOOL, "list", "notes", result_rows, summary)


async def _load(ctx: ExecContext, note_id: str, *, lock: bool = False) -> dict[str, Any]:
    return await load_owned(ctx, "notes", _COLUMNS, _KIND, note_id, lock=lock)


async def read_note(ctx: ExecContext, args: NoteReadArgs) -> ActionResult:
    """One note with its text."""
    row = await _load(ctx, args.note_id)
    return item_result(_TOOL, "read", row, f"The note {quoted(row['title'])}.")


def _render_read(result: ActionResult) -> str:
    item = result.get("item") or {}
    return f"{item.get('title', '')}\n\n{item.get('body', '')}".strip()


async def preview_create(ctx: ExecContext, args: NoteCreateArgs) -> str:
    """``Write the note “Wifi” (the password is on the fridge)``."""
    return f"Write the note {quoted(args.title)}" + (f" ({clip(args.body, 80)})" if args.body else "")


async def create_note(ctx: ExecContext, args: NoteCreateArgs) -> ActionResult:
    """Insert an active note."""
    row = await fetch_one(
        ctx, f"INSERT INTO notes (id, owner_id, title, body, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s)"
        f" RETURNING {_COLUMNS}", (new_id("note"), ctx.owner_id, args.title, args.body, ctx.now, ctx.now),
    )
    assert row is not None  # INSERT ... RETURNING always yields the row
    return write_result(_TOOL, "create", row, 1, f"Wrote the note {quoted(row['title'])}.")


async def preview_update(ctx: ExecContext, args: NoteUpdateArgs) -> str:
    """``Change the note “Wifi”: new text (…)``."""
    row = await _load(ctx, args.note_id)
    changes = []
    if args.title is not None and args.title != row["title"]:
        changes.append(f"title to {quoted(args.title)}")
    if args.body is not None and args.body != row["body"]:
        changes.append(f"text to “{clip(args.body, 80)}”")
    if not changes:
        return f"Leave the note {quoted(row['title'])} as it is (nothing would change)"
    return f"Change the note {quoted(row['title'])}: " + ", ".join(changes)


async def update_note(ctx: ExecContext, args: NoteUpdateArgs) -> ActionResult:
    """Change the fields given; a note left as it was reports no change."""
    row = await _load(ctx, args.note_id, lock=True)
    title = args.title if args.title is not None else row["title"]
    body = args.body if args.body is not None else row["body"]
    if (title, body) == (row["title"], row["body"]):
        return write_result(_TOOL, "update", row, 0, f"The note {quoted(row['title'])} already says that; nothing changed.")
    updated = await fetch_one(
        ctx, f"UPDATE notes SET title = %s, body = %s, updated_at = %s WHERE owner_id = %s AND id = %s RETURNING {_COLUMNS}",
        (title, body, ctx.now, ctx.owner_id, row["id"]),
    )
    assert updated is not None
    return write_result(_TOOL, "update", updated, 1, f"Changed the note {quoted(updated['title'])}.")


async def preview_archive(ctx: ExecContext, args: NoteArchiveArgs) -> str:
    """``Archive the note “Wifi” (it can be brought back)``."""
    row = await _load(ctx, args.note_id)
    if row["status"] == "archived":
        return f"Archive the note {quoted(row['title'])} (it is already archived: approving changes nothing)"
    return f"Archive the note {quoted(row['title'])} (it can be brought back)"


async def archive_note(ctx: ExecContext, args: NoteArchiveArgs) -> ActionResult:
    """Archive (soft); a note already archived is left as it is."""
    row = await _load(ctx, args.note_id, lock=True)
    if row["status"] == "archived":
        return write_result(_TOOL, "archive", row, 0, f"The note {quoted(row['title'])} was already archived.")
    updated = await fetch_one(
        ctx, f"UPDATE notes SET status = 'archived', archived_at = %s WHERE owner_id = %s AND id = %s RETURNING {_COLUMNS}",
        (ctx.now, ctx.owner_id, row["id"]),
    )
    assert updated is not None
    return write_result(_TOOL, "archive", updated, 1, f"Archived the note {quoted(updated['title'])}.")


NOTES = ToolSpec(
    name=_TOOL,
    description="Your notes.",
    capability_phrase="keep notes",
    database=True,
    actions=(
        ActionSpec(
            name="list", description="List your notes, most recently changed first (optionally containing some text).",
            args=NoteListArgs, tier="allowlist", executor=list_notes, renderer=render_list,
            usage_examples=("Show my notes", "Do I have a note about the wifi?", "List my archived notes"),
        ),
        ActionSpec(
            name="read", description="Open one note from the latest notes list and show its text.",
            args=NoteReadArgs, tier="allowlist", executor=read_note, renderer=_render_read, id_fields=_ID,
            usage_examples=("Open the first note", "What does my wifi note say?", "Read #2"),
        ),
        ActionSpec(
            name="create", description="Write a new note (after your approval).",
            args=NoteCreateArgs, tier="confirmation", executor=create_note, renderer=render_summary,
            preview=preview_create, idempotent=False, effect="write",
            usage_examples=("Make a note: the wifi password is on the fridge", "Note to self: call the plumber",
                            "Jot down: Sam's birthday is 12 May"),
        ),
        ActionSpec(
            name="update", description="Change the title or text of a note from the latest notes list (after your approval).",
            args=NoteUpdateArgs, tier="confirmation", executor=update_note, renderer=render_summary,
            preview=preview_update, id_fields=_ID, effect="write",
            usage_examples=("Add 'and the router' to the wifi note", "Rename #1 to Plumber", "Change that note's text"),
        ),
        ActionSpec(
            name="archive", description="Archive a note from the latest notes list (it can be brought back).",
            args=NoteArchiveArgs, tier="confirmation", executor=archive_note, renderer=render_summary,
            preview=preview_archive, id_fields=_ID, effect="write",
            usage_examples=("Archive the wifi note", "Put #2 away", "I don't need that note any more"),
        ),
    ),
)
"""The notes tool."""
