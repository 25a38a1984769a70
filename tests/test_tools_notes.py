"""The notes tool on the real compiled graph: write, read, change and archive (soft), each write after approval."""

from __future__ import annotations

from typing import Any

from tollgate.graph.state import Context
from tollgate.graph.store.db import Database
from tests.conftest import all_rows
from tests.fakes import ScriptedModel, call, say
from tests.harness import Turns, what_runs


async def _notes(db: Database, owner: str) -> list[dict[str, Any]]:
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT id, title, body, status FROM notes WHERE owner_id = %s ORDER BY created_at",
                                 (owner,))
        return list(await cur.fetchall())


async def _approve(turns: Turns, model: ScriptedModel, ctx: Context, thread: str, function: str, args: dict[str, Any],
                   text: str) -> tuple[str, str | None]:
    model.push(call(function, args))
    out = await turns.send(ctx, thread, text)
    assert out.approval is not None, out.reply
    done = await turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed"
    return what_runs(out.approval.preview), done.reply


async def test_notes_are_written_read_changed_and_archived_never_deleted(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    thread = ctx.owner_id + "/notes"
    preview, _ = await _approve(turns, model, ctx, thread, "notes__create",
                                {"title": "Wifi", "body": "the password is on the fridge"}, "make a note about the wifi")
    assert preview == "Write the note “Wifi” (the password is on the fridge)"
    [note] = await _notes(db, ctx.owner_id)
    assert (note["title"], note["body"], note["status"]) == ("Wifi", "the password is on the fridge", "active")

    model.push(call("notes__read", {"note_id": note["id"]}), say(""))  # the note just written binds
    read = await turns.send(ctx, thread, "what does it say?")
    assert read.outcome == "read" and read.reply is not None and "on the fridge" in read.reply

    preview, _ = await _approve(turns, model, ctx, thread, "notes__update",
                                {"note_id": note["id"], "body": "the password is on the router"}, "change it")
    assert preview == "Change the note “Wifi”: text to “the password is on the router”"

    model.push(call("notes__list", {"contains": "ROUTER"}), say(""))
    listed = await turns.send(ctx, thread, "do I have a note about the router?")
    assert listed.reply is not None and "Wifi" in listed.reply

    preview, _ = await _approve(turns, model, ctx, thread, "notes__archive", {"note_id": "#1"}, "archive that note")
    assert preview == "Archive the note “Wifi” (it can be brought back)"
    [archived] = await _notes(db, ctx.owner_id)
    assert archived["status"] == "archived" and archived["body"] == "the password is on the router"  # kept

    model.push(call("notes__list", {}), say(""))
    assert "Wifi" not in ((await turns.send(ctx, thread, "show my notes")).reply or "")
    model.push(call("notes__list", {"status": "archived"}), say(""))
    assert "Wifi" in ((await turns.send(ctx, thread, "show my archived notes")).reply or "")


async def test_a_note_of_another_owner_cannot_be_read(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    async with all_rows(db) as conn:
        await conn.execute("INSERT INTO notes (id, owner_id, title) VALUES ('note_other00001', 'someone-else', 'secret')")
    model.push(call("notes__read", {"note_id": "note_other00001"}))
    out = await turns.send(ctx, ctx.owner_id + "/notes-foreign", "read note_other00001")
    assert out.outcome == "clarify" and out.reply is not None and "secret" not in out.reply
