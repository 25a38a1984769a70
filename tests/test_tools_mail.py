"""The mail tool against real PostgreSQL: folders, filters, soft trash, mark read, owner isolation."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from psycopg import AsyncConnection

from tollgate.policies.errors import NotFound
from tollgate.tools._ids import new_id
from tollgate.tools.args import MailListArgs, MailMarkReadArgs, MailReadArgs, MailSendArgs, MailTrashArgs
from tollgate.tools.demo import seed_demo
from tollgate.tools.mail import MAIL, list_mail, mark_read, preview_send, preview_trash, read_mail, send_mail, trash_mail
from tollgate.tools.registry import ExecContext

PARIS = ZoneInfo("Europe/Paris")
NOW = datetime(2026, 11, 30, 8, 0, tzinfo=PARIS)


def ctx_for(conn: AsyncConnection[Any], owner: str) -> ExecContext:
    return ExecContext(owner_id=owner, timezone="Europe/Paris", now=NOW, conn=conn)


async def seeded(conn: AsyncConnection[Any], owner: str) -> ExecContext:
    assert await seed_demo(conn, owner, NOW, "Europe/Paris")
    return ctx_for(conn, owner)


async def inbox_ids(ctx: ExecContext) -> dict[str, str]:
    """Subject -> id of the inbox."""
    cur = await ctx.conn.execute(
        "SELECT id, subject FROM mail_messages WHERE owner_id = %s AND trashed_at IS NULL", (ctx.owner_id,)
    )
    return {r["subject"]: r["id"] for r in await cur.fetchall()}


async def add_message(ctx: ExecContext, sender: str, subject: str, minutes_ago: int = 5) -> str:
    message_id = new_id("msg")
    await ctx.conn.execute(
        "INSERT INTO mail_messages (id, owner_id, from_addr, to_addrs, subject, body, received_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (message_id, ctx.owner_id, sender, ["you@example.com"], subject, "Hello.", NOW - timedelta(minutes=minutes_ago)),
    )
    return message_id


def _render(action: str, result: Any) -> str:
    return next(a for a in MAIL.actions if a.name == action).renderer(result)


async def test_inbox_is_newest_first_with_read_state(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    result = await list_mail(ctx, MailListArgs())
    assert result["list_kind"] == "mail" and len(result["rows"]) == 6
    assert result["rows"][0]["label"] == "sam@example.com — “Lunch today?” (Mon 30 Nov, 07:20, unread)"
    assert result["rows"][2]["label"] == "priya@example.org — “Notes for the design review” (Sun 29 Nov, 07:00)"
    rendered = _render("list", result)
    assert rendered.startswith("You have 6 messages in your inbox:\n1. sam@example.com")
    assert "You won a prize" not in rendered  # trashed


async def test_unread_trash_and_sender_filters(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    unread = await list_mail(ctx, MailListArgs(unread_only=True))
    assert [r["label"].split(" — ")[0] for r in unread["rows"]] == ["sam@example.com", "billing@example.net"]
    assert unread["summary"] == "You have 2 unread messages in your inbox."
    trash = await list_mail(ctx, MailListArgs(folder="trash"))
    assert [r["label"].split(" — ")[0] for r in trash["rows"]] == ["deals@promo.example.biz"]
    billing = await list_mail(ctx, MailListArgs(from_contains="BILLING"))
    assert len(billing["rows"]) == 1
    assert billing["summary"] == "You have 1 message in your inbox from senders matching “BILLING”."
    none = await list_mail(ctx, MailListArgs(from_contains="nobody", unread_only=True))
    assert _render("list", none) == "You have no unread messages in your inbox from senders matching “nobody”."


@pytest.mark.parametrize(
    ("needle", "expected"),
    [
        pytest.param("a_b", ["a_b@example.com"], id="underscore-is-literal"),
        pytest.param("50%", ["50%off@example.com"], id="percent-is-literal"),
        pytest.param("\\", ["back\\slash@example.com"], id="backslash-is-literal"),
    ],
)
async def test_sender_filter_escapes_like_wildcards(
    conn: AsyncConnection[Any], owner: str, needle: str, expected: list[str]
) -> None:
    ctx = ctx_for(conn, owner)
    for i, sender in enumerate(["a_b@example.com", "axb@example.com", "50%off@example.com", "50xoff@example.com",
                                "back\\slash@example.com"]):
        await add_message(ctx, sender, f"Message {i}", minutes_ago=i + 1)
    result = await list_mail(ctx, MailListArgs(from_contains=needle))
    assert [r["label"].split(" — ")[0] for r in result["rows"]] == expected


async def test_read_shows_the_body_and_does_not_mark_read(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    sam = (await inbox_ids(ctx))["Lunch today?"]
    result = await read_mail(ctx, MailReadArgs(message_id=sam))
    assert result["kind"] == "item" and result["item"]["is_read"] is False
    assert result["summary"] == "Message from sam@example.com: “Lunch today?” (Mon 30 Nov, 07:20)."
    assert _render("read", result) == (
        "From: sam@example.com\nTo: you@example.com\nDate: Mon 30 Nov, 07:20\nSubject: Lunch today?\n\n"
        "Hi! Still on for lunch at 12:30? There is a new place near the office. Sam"
    )
    cur = await conn.execute("SELECT is_read FROM mail_messages WHERE id = %s", (sam,))
    assert await cur.fetchone() == {"is_read": False}


async def test_send_previews_then_queues_to_the_sent_folder(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = ctx_for(conn, owner)
    args = MailSendArgs(to=["sam@example.com", "alex@example.com"], subject="Running late", body="x" * 400)
    preview = await preview_send(ctx, args)
    assert preview == "Send mail to sam@example.com, alex@example.com\nSubject: “Running late”\n\n" + "x" * 300 + "…"
    result = await send_mail(ctx, args)
    assert result["changed"] == 1 and result["item"]["id"].startswith("out_")
    assert _render("send", result) == "Sent “Running late” to sam@example.com, alex@example.com."
    sent = await list_mail(ctx, MailListArgs(folder="sent"))
    label = "To sam@example.com, alex@example.com — “Running late” (Mon 30 Nov, 08:00)"
    assert sent["rows"] == [{"id": result["item"]["id"], "label": label}]
    assert (await list_mail(ctx, MailListArgs(folder="sent", from_contains="alex")))["rows"] == sent["rows"]
    assert (await list_mail(ctx, MailListArgs(folder="sent", from_contains="priya")))["rows"] == []
    opened = await read_mail(ctx, MailReadArgs(message_id=result["item"]["id"]))
    assert (opened["item"]["folder"], opened["item"]["body"]) == ("sent", "x" * 400)


async def test_trash_is_soft_and_reports_what_changed(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    ids = await inbox_ids(ctx)
    news, alex = ids["This week in tech"], ids["Re: Project timeline"]
    preview = await preview_trash(ctx, MailTrashArgs(message_ids=[news]))
    assert preview == (
        "Move 1 message to the trash:\n- “This week in tech” from news@weekly.example.com (Sun 29 Nov, 04:00)"
    )
    first = await trash_mail(ctx, MailTrashArgs(message_ids=[news]))
    assert first["changed"] == 1 and _render("trash", first) == "Moved 1 message to the trash: “This week in tech”."
    cur = await conn.execute("SELECT trashed_at FROM mail_messages WHERE id = %s", (news,))
    assert await cur.fetchone() == {"trashed_at": NOW}
    assert news not in [r["id"] for r in (await list_mail(ctx, MailListArgs()))["rows"]]
    assert news in [r["id"] for r in (await list_mail(ctx, MailListArgs(folder="trash")))["rows"]]
    mixed = await trash_mail(ctx, MailTrashArgs(message_ids=[news, alex]))
    assert mixed["changed"] == 1
    assert mixed["summary"] == "Moved 1 message to the trash: “Re: Project timeline”; 1 was already there."
    assert mixed["item"]["changed_ids"] == [alex]
    again = await trash_mail(ctx, MailTrashArgs(message_ids=[news, alex]))
    assert again["changed"] == 0 and again["summary"] == "All 2 messages were already in the trash; nothing changed."


async def test_mark_read_counts_only_real_changes(conn: AsyncConnection[Any], owner: str) -> None:
    ctx = await seeded(conn, owner)
    ids = await inbox_ids(ctx)
    both = [ids["Lunch today?"], ids["Your invoice is ready"], ids["Re: Project timeline"]]
    result = await mark_read(ctx, MailMarkReadArgs(message_ids=both))
    assert result["changed"] == 2
    assert result["summary"] == (
        "Marked 2 messages as read: “Lunch today?” and “Your invoice is ready”; 1 was already read."
    )
    assert (await list_mail(ctx, MailListArgs(unread_only=True)))["rows"] == []
    again = await mark_read(ctx, MailMarkReadArgs(message_ids=both[:1]))
    assert again["changed"] == 0 and again["summary"] == "“Lunch today?” was already read; nothing changed."


async def test_another_owner_cannot_see_or_touch_mail(conn: AsyncConnection[Any], owner: str) -> None:
    ctx_a = await seeded(conn, owner)
    ids = await inbox_ids(ctx_a)
    sam = ids["Lunch today?"]
    ctx_b = ctx_for(conn, owner + "_b")
    own_b = await add_message(ctx_b, "sam@example.com", "Only for B")
    assert [r["id"] for r in (await list_mail(ctx_b, MailListArgs()))["rows"]] == [own_b]
    assert (await list_mail(ctx_b, MailListArgs(from_contains="sam", folder="trash")))["rows"] == []
    with pytest.raises(NotFound):
        await read_mail(ctx_b, MailReadArgs(message_id=sam))
    with pytest.raises(NotFound):
        await preview_trash(ctx_b, MailTrashArgs(message_ids=[sam]))
    # One foreign id in a bulk action refuses the whole action: B's own message is untouched too.
    with pytest.raises(NotFound):
        await trash_mail(ctx_b, MailTrashArgs(message_ids=[own_b, sam]))
    with pytest.raises(NotFound):
        await mark_read(ctx_b, MailMarkReadArgs(message_ids=[own_b, sam]))
    cur = await conn.execute("SELECT id, is_read, trashed_at FROM mail_messages WHERE id = ANY(%s) ORDER BY id",
                             ([sam, own_b],))
    assert all(not r["is_read"] and r["trashed_at"] is None for r in await cur.fetchall())
