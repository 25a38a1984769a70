"""The mail tool: list, read, send, (softly) trash and mark read.

The executors run on a :class:`MailStore`. The built-in one (:data:`TABLE`) keeps received mail
in ``mail_messages`` (trash = ``trashed_at`` set, reversible) and queues sent mail in
``mail_outbox``, listed as the ``sent`` folder; an owner's own servers are another store
(``tools.connectors.imap_mail``). Reading never marks a message read: only the explicit
``mark_read`` action does.
"""

from __future__ import annotations

from typing import Any, Final, LiteralString, Protocol

from tollgate.policies.errors import NotFound
from tollgate.tools._ids import new_id
from tollgate.tools._render import (
    clip,
    escape_like,
    fetch_all,
    fetch_one,
    fmt_when,
    item_result,
    list_result,
    plural,
    quoted,
    render_list,
    render_summary,
    write_result,
)
from tollgate.tools.args import MailListArgs, MailMarkReadArgs, MailReadArgs, MailSendArgs, MailTrashArgs
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, ResultRow, ToolSpec

__all__ = [
    "MAIL",
    "TABLE",
    "MailStore",
    "list_mail",
    "mark_read",
    "preview_send",
    "preview_trash",
    "read_mail",
    "send_mail",
    "trash_mail",
]

_TOOL: Final = "mail"
_KIND: Final = "mail message"
_PREVIEW_BODY_CHARS: Final = 300


class MailStore(Protocol):
    """Where an owner's mail is: Tollgate's own tables (:data:`TABLE`), or their IMAP and SMTP
    servers (``tools.connectors.imap_mail``).

    Listed rows are dicts with ``id``, ``from_addr``, ``to_addrs``, ``subject``, ``at`` and
    ``is_read``; a read message adds ``folder`` and ``body``; a received one (for trash and
    mark read) has ``in_trash``.
    """

    id_kind: str
    """The kind its ids are (``mail`` for Tollgate's tables); what the thread binds them as."""

    async def listing(self, ctx: ExecContext, args: MailListArgs) -> tuple[list[dict[str, Any]], bool]:
        """Up to ``args.limit`` messages of the folder, newest first, and whether there are more."""
        ...

    async def message(self, ctx: ExecContext, message_id: str) -> dict[str, Any]:
        """One message with its body, received or sent, not marked read; :class:`NotFound` otherwise."""
        ...

    async def received(self, ctx: ExecContext, ids: list[str], *, lock: bool = False) -> list[dict[str, Any]]:
        """The owner's received messages for ``ids``, in order; :class:`NotFound` if one is missing."""
        ...

    async def send(self, ctx: ExecContext, args: MailSendArgs) -> dict[str, Any]:
        """Send (once per ``ctx.idempotency_key``); the sent row: ``id``, ``to_addrs``, ``subject``, ``body``,
        ``created_at``, and ``refused`` when the server took the message for only some recipients."""
        ...

    async def trash(self, ctx: ExecContext, rows: list[dict[str, Any]]) -> set[str]:
        """Move ``rows`` to the trash (restorable); the ids that moved."""
        ...

    async def mark_read(self, ctx: ExecContext, rows: list[dict[str, Any]]) -> set[str]:
        """Mark ``rows`` read; the ids that were unread."""
        ...


class _Tables:
    """The owner's mail in ``mail_messages`` and ``mail_outbox`` (the call's connection, scoped to its owner)."""

    id_kind = _TOOL

    async def listing(self, ctx: ExecContext, args: MailListArgs) -> tuple[list[dict[str, Any]], bool]:
        pattern = f"%{escape_like(args.from_contains)}%" if args.from_contains else None
        params: list[Any] = [ctx.owner_id]
        if args.folder == "sent":
            # Sent mail has no sender to match but the owner, so the filter matches recipients.
            sql: LiteralString = (
                "SELECT id, NULL AS from_addr, to_addrs, subject, created_at AS at, true AS is_read"
                " FROM mail_outbox WHERE owner_id = %s")
            if pattern:
                sql += " AND array_to_string(to_addrs, ', ') ILIKE %s ESCAPE '\\'"
                params.append(pattern)
            sql += " ORDER BY created_at DESC, id LIMIT %s"
        else:
            sql = ("SELECT id, from_addr, to_addrs, subject, received_at AS at, is_read FROM mail_messages"
                   " WHERE owner_id = %s")
            sql += " AND trashed_at IS NULL" if args.folder == "inbox" else " AND trashed_at IS NOT NULL"
            if args.unread_only:
                sql += " AND NOT is_read"
            if pattern:
                sql += " AND from_addr ILIKE %s ESCAPE '\\'"
                params.append(pattern)
            sql += " ORDER BY received_at DESC, id LIMIT %s"
        params.append(args.limit + 1)
        rows = await fetch_all(ctx, sql, params)
        return rows[: args.limit], len(rows) > args.limit

    async def message(self, ctx: ExecContext, message_id: str) -> dict[str, Any]:
        row = await fetch_one(
            ctx,
            "SELECT id, from_addr, to_addrs, subject, body, received_at AS at, is_read,"
            " CASE WHEN trashed_at IS NULL THEN 'inbox' ELSE 'trash' END AS folder"
            " FROM mail_messages WHERE owner_id = %s AND id = %s",
            (ctx.owner_id, message_id),
        )
        if row is None:
            row = await fetch_one(
                ctx,
                "SELECT id, 'you' AS from_addr, to_addrs, subject, body, created_at AS at, true AS is_read,"
                " 'sent' AS folder FROM mail_outbox WHERE owner_id = %s AND id = %s",
                (ctx.owner_id, message_id),
            )
        if row is None:
            raise NotFound(_KIND, message_id)
        return row

    async def received(self, ctx: ExecContext, ids: list[str], *, lock: bool = False) -> list[dict[str, Any]]:
        sql: LiteralString = (
            "SELECT id, from_addr, subject, received_at AS at, is_read, trashed_at IS NOT NULL AS in_trash"
            " FROM mail_messages WHERE owner_id = %s AND id = ANY(%s)"
        )
        rows = await fetch_all(ctx, sql + (" ORDER BY id FOR UPDATE" if lock else ""), (ctx.owner_id, ids))
        by_id = {r["id"]: r for r in rows}
        for message_id in ids:
            if message_id not in by_id:
                raise NotFound(_KIND, message_id)
        return [by_id[i] for i in ids]

    async def send(self, ctx: ExecContext, args: MailSendArgs) -> dict[str, Any]:
        row = await fetch_one(
            ctx,
            "INSERT INTO mail_outbox (id, owner_id, to_addrs, subject, body, created_at)"
            " VALUES (%s, %s, %s, %s, %s, %s) RETURNING id, to_addrs, subject, body, created_at",
            (new_id("out"), ctx.owner_id, list(args.to), args.subject, args.body, ctx.now),
        )
        assert row is not None  # INSERT ... RETURNING always yields the row
        return row

    async def trash(self, ctx: ExecContext, rows: list[dict[str, Any]]) -> set[str]:
        changed = await fetch_all(
            ctx,
            "UPDATE mail_messages SET trashed_at = %s WHERE owner_id = %s AND id = ANY(%s) AND trashed_at IS NULL"
            " RETURNING id",
            (ctx.now, ctx.owner_id, [r["id"] for r in rows]),
        )
        return {r["id"] for r in changed}

    async def mark_read(self, ctx: ExecContext, rows: list[dict[str, Any]]) -> set[str]:
        changed = await fetch_all(
            ctx,
            "UPDATE mail_messages SET is_read = true WHERE owner_id = %s AND id = ANY(%s) AND NOT is_read RETURNING id",
            (ctx.owner_id, [r["id"] for r in rows]),
        )
        return {r["id"] for r in changed}


TABLE: Final[MailStore] = _Tables()
"""The built-in store: Tollgate's own mail tables."""


def _inbox_label(row: dict[str, Any], tz: str) -> str:
    unread = ", unread" if not row["is_read"] else ""
    return f"{clip(row['from_addr'], 60)} — {quoted(row['subject'])} ({fmt_when(row['at'], tz)}{unread})"


def _sent_label(row: dict[str, Any], tz: str) -> str:
    to = clip(", ".join(row["to_addrs"]), 60)
    return f"To {to} — {quoted(row['subject'])} ({fmt_when(row['at'], tz)})"


async def list_mail(ctx: ExecContext, args: MailListArgs, store: MailStore = TABLE) -> ActionResult:
    """Messages of a folder, newest first, optionally unread only or from a matching sender."""
    shown, more = await store.listing(ctx, args)
    label = _sent_label if args.folder == "sent" else _inbox_label
    result_rows: list[ResultRow] = [{"id": r["id"], "label": label(r, ctx.timezone)} for r in shown]
    return list_result(_TOOL, "list", store.id_kind, result_rows, _list_summary(args, len(shown), more))


def _list_summary(args: MailListArgs, count: int, more: bool) -> str:
    unread = "unread " if args.unread_only and args.folder != "sent" else ""
    where = {"inbox": "in your inbox", "trash": "in your trash", "sent": "in your sent mail"}[args.folder]
    match = ""
    if args.from_contains:
        role = "to recipients" if args.folder == "sent" else "from senders"
        match = f" {role} matching {quoted(args.from_contains, 60)}"
    if count == 0:
        return f"You have no {unread}messages {where}{match}."
    if more:
        return f"You have more than {count} {unread}messages {where}{match}; here are the newest {count}."
    return f"You have {plural(count, unread + 'message')} {where}{match}."


async def read_mail(ctx: ExecContext, args: MailReadArgs, store: MailStore = TABLE) -> ActionResult:
    """One message with its body (received or sent); it is not marked read."""
    row = await store.message(ctx, args.message_id)
    sender, at = row["from_addr"], row["at"]
    when = fmt_when(at, ctx.timezone)
    item = {
        "id": row["id"],
        "folder": row["folder"],
        "from": sender,
        "to": list(row["to_addrs"]),
        "subject": row["subject"],
        "body": row["body"],
        "date": at,
        "when": when,
        "is_read": row["is_read"],
    }
    summary = f"Message from {clip(sender, 60)}: {quoted(row['subject'])} ({when})."
    return item_result(_TOOL, "read", item, summary, id_kind=store.id_kind)


def _render_read(result: ActionResult) -> str:
    item = result.get("item") or {}
    return (
        f"From: {item.get('from', '')}\nTo: {', '.join(item.get('to', []))}\nDate: {item.get('when', '')}\n"
        f"Subject: {clip(str(item.get('subject', '')), 200)}\n\n{item.get('body', '')}"
    )


async def preview_send(ctx: ExecContext, args: MailSendArgs, store: MailStore = TABLE) -> str:
    """Recipients, subject and the first few hundred characters of the body."""
    body = args.body if len(args.body) <= _PREVIEW_BODY_CHARS else args.body[:_PREVIEW_BODY_CHARS].rstrip() + "…"
    return f"Send mail to {', '.join(args.to)}\nSubject: {quoted(args.subject, 200)}\n\n{body}"


async def send_mail(ctx: ExecContext, args: MailSendArgs, store: MailStore = TABLE) -> ActionResult:
    """Send the message (the built-in store queues it in the outbox; it then shows in the sent folder)."""
    row = await store.send(ctx, args)
    refused = row.get("refused") or []
    taken = [a for a in args.to if a not in refused]
    summary = f"Sent {quoted(args.subject)} to {', '.join(taken)}."
    if refused:
        summary += f" The mail server refused {', '.join(refused)}: it was not sent to {'them' if len(refused) > 1 else 'that address'}."
    return write_result(_TOOL, "send", row, 1, summary, id_kind=store.id_kind)


def _titles(rows: list[dict[str, Any]]) -> str:
    names = [quoted(r["subject"], 60) for r in rows]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _bulk_item(rows: list[dict[str, Any]], changed: set[str]) -> dict[str, Any]:
    return {
        "message_ids": [r["id"] for r in rows],
        "changed_ids": [r["id"] for r in rows if r["id"] in changed],
        "messages": [{"id": r["id"], "from": r["from_addr"], "subject": r["subject"]} for r in rows],
    }


async def preview_trash(ctx: ExecContext, args: MailTrashArgs, store: MailStore = TABLE) -> str:
    """``Move 2 messages to the trash:`` and one line per message."""
    rows = await store.received(ctx, list(dict.fromkeys(args.message_ids)))
    lines = [
        f"- {quoted(r['subject'])} from {clip(r['from_addr'], 60)} ({fmt_when(r['at'], ctx.timezone)})"
        + (" — already in the trash" if r["in_trash"] else "")
        for r in rows
    ]
    return f"Move {plural(len(rows), 'message')} to the trash:\n" + "\n".join(lines)


def _bulk_result(rows: list[dict[str, Any]], changed: set[str], *, action: str, done: str, state: str,
                 others: str) -> ActionResult:
    """Say what a bulk write over ``rows`` changed and what already was.

    ``state`` names the state when nothing changed ("already in the trash"), ``others`` the
    rest when some did ("1 was already there").
    """
    hit = [r for r in rows if r["id"] in changed]
    already = len(rows) - len(hit)
    if not hit:
        what = _titles(rows) if len(rows) == 1 else f"All {len(rows)} messages"
        summary = f"{what} {'was' if len(rows) == 1 else 'were'} already {state}; nothing changed."
    else:
        summary = f"{done.format(n=plural(len(hit), 'message'))}: {_titles(hit)}"
        summary += f"; {already} {'was' if already == 1 else 'were'} already {others}." if already else "."
    return write_result(_TOOL, action, _bulk_item(rows, changed), len(hit), summary)


async def trash_mail(ctx: ExecContext, args: MailTrashArgs, store: MailStore = TABLE) -> ActionResult:
    """Soft-trash: messages move to the trash (restorable); those already there are left as they are."""
    rows = await store.received(ctx, list(dict.fromkeys(args.message_ids)), lock=True)
    return _bulk_result(rows, await store.trash(ctx, rows), action="trash", done="Moved {n} to the trash",
                        state="in the trash", others="there")


async def mark_read(ctx: ExecContext, args: MailMarkReadArgs, store: MailStore = TABLE) -> ActionResult:
    """Mark messages read; ones already read are left as they are."""
    rows = await store.received(ctx, list(dict.fromkeys(args.message_ids)), lock=True)
    return _bulk_result(rows, await store.mark_read(ctx, rows), action="mark_read", done="Marked {n} as read",
                        state="read", others="read")


_MESSAGE_IDS = {"message_ids": "mail"}

MAIL = ToolSpec(
    database=True,
    name=_TOOL,
    description="Your mailbox: inbox, sent mail and trash.",
    capability_phrase="read, send and tidy your mail",
    actions=(
        ActionSpec(
            name="list",
            description="List messages in your inbox, sent mail or trash, optionally unread only or from a sender.",
            args=MailListArgs,
            tier="allowlist",
            executor=list_mail,
            renderer=render_list,
            usage_examples=("Check my inbox", "Any unread mail?", "Show me emails from Sam"),
        ),
        ActionSpec(
            name="read",
            description="Open one message from the latest mail list and show its body.",
            args=MailReadArgs,
            tier="allowlist",
            executor=read_mail,
            renderer=_render_read,
            id_fields={"message_id": "mail"},
            usage_examples=("Read the first one", "Open the email from billing", "What does #3 say?"),
        ),
        ActionSpec(
            name="send",
            description="Send a new plain-text message (after your approval).",
            args=MailSendArgs,
            tier="confirmation",
            executor=send_mail,
            renderer=render_summary,
            preview=preview_send,
            idempotent=False,
            effect="write",
            usage_examples=(
                "Email sam@example.com that I'll be 10 minutes late",
                "Send a thank-you note to priya@example.org",
                "Write to alex@example.com asking for the project timeline",
            ),
        ),
        ActionSpec(
            name="trash",
            description="Move messages from the latest mail list to the trash (they can be restored).",
            args=MailTrashArgs,
            tier="confirmation",
            executor=trash_mail,
            renderer=render_summary,
            preview=preview_trash,
            id_fields=_MESSAGE_IDS,
            effect="write",
            usage_examples=("Delete the newsletter", "Trash #2 and #4", "Get rid of the billing email"),
        ),
        ActionSpec(
            name="mark_read",
            description="Mark messages from the latest mail list as read.",
            args=MailMarkReadArgs,
            tier="allowlist",
            executor=mark_read,
            renderer=render_summary,
            id_fields=_MESSAGE_IDS,
            effect="write",
            usage_examples=("Mark them all as read", "Mark the first one read", "Mark #2 as read"),
        ),
    ),
)
"""The mail tool."""
