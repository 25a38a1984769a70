"""The mail tool on an owner's own IMAP and SMTP servers: the same actions, another :class:`MailStore`.

:func:`mail_for` is the mail tool for a deployment's settings (``TOLLGATE_MAIL_BACKEND``, per
owner in ``TOLLGATE_MAIL_BACKEND_OWNERS``; Tollgate's own tables by default). For an owner on
``imap`` its writes (send, trash, mark read) are remote writes: the intent is committed before
the server is touched and the outcome after, and after a crash in between the ``reconcile``
hooks ask the server what happened (the Sent folder for a send, by its Message-ID), so nothing
is sent twice and nothing is reported undone that was done.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tollgate.policies.errors import ErrorCode, TollgateError, Unavailable
from tollgate.tools import mail as builtin
from tollgate.tools._render import plural, quoted, write_result
from tollgate.tools.args import MailListArgs, MailMarkReadArgs, MailSendArgs, MailTrashArgs
from tollgate.tools.connectors.backends import backend_of, backends_chosen, on_stores, private_network_owners
from tollgate.tools.connectors.imap import ImapMailbox, MailAccount
from tollgate.tools.connectors.imap_session import ID_PATTERN, RemoteMessage
from tollgate.tools.mail import MAIL, TABLE, MailStore
from tollgate.tools.registry import ExecContext, IdKind, Reconciled, ToolSpec

__all__ = ["ACCOUNT_NAMES", "IMAP_MAIL", "MailAccountMissing", "ImapMessages", "mail_for"]

ACCOUNT_NAMES: Final = ("imap_url", "smtp_url", "mail_username", "mail_password", "mail_address")
"""The mail tool's credentials (``tollgate account add --kind imap``) that make an owner's account."""
IMAP_MAIL: Final = IdKind("imap_mail", pattern=ID_PATTERN, noun="mail")
"""The ids of messages on an owner's IMAP server: for that owner the mail tool's id fields bind
these, never the built-in ``mail`` ids (which name nothing on their server)."""


class MailAccountMissing(TollgateError):
    """The owner's mail is set to IMAP but no account is connected."""

    code: ErrorCode = "unavailable"

    def __init__(self) -> None:
        super().__init__("no mail account is connected yet (tollgate account add --kind imap)")


def _row(message: RemoteMessage) -> dict[str, Any]:
    return {"id": message.id, "from_addr": message.from_addr, "to_addrs": list(message.to_addrs),
            "subject": message.subject, "at": message.at, "is_read": message.is_read, "folder": message.folder,
            "body": message.body, "in_trash": message.folder == "trash", "remote": message}


def _sent_row(message: RemoteMessage) -> dict[str, Any]:
    return {"id": message.id, "to_addrs": list(message.to_addrs), "subject": message.subject, "body": message.body,
            "created_at": message.at, "refused": list(message.refused)}


class ImapMessages:
    """A :class:`~tools.mail.MailStore` on one owner's IMAP mailbox and SMTP server."""

    id_kind = IMAP_MAIL.name

    def __init__(self, mailbox: ImapMailbox) -> None:
        self.mailbox = mailbox

    async def listing(self, ctx: ExecContext, args: MailListArgs) -> tuple[list[dict[str, Any]], bool]:
        found, more = await self.mailbox.list(args.folder, unread_only=args.unread_only, contains=args.from_contains,
                                              limit=args.limit)
        return [_row(m) for m in found], more

    async def message(self, ctx: ExecContext, message_id: str) -> dict[str, Any]:
        return _row(await self.mailbox.read(message_id))

    async def received(self, ctx: ExecContext, ids: list[str], *, lock: bool = False) -> list[dict[str, Any]]:
        return [_row(m) for m in await self.mailbox.messages(ids)]

    async def send(self, ctx: ExecContext, args: MailSendArgs) -> dict[str, Any]:
        if ctx.idempotency_key is None:
            raise Unavailable("a send without its idempotency key")  # every approved write has one
        sent = await self.mailbox.send(ctx.idempotency_key, to=list(args.to), subject=args.subject, body=args.body,
                                       now=ctx.now)
        return _sent_row(sent) | {"body": args.body}

    async def trash(self, ctx: ExecContext, rows: list[dict[str, Any]]) -> set[str]:
        return await self.mailbox.trash([r["remote"] for r in rows])

    async def mark_read(self, ctx: ExecContext, rows: list[dict[str, Any]]) -> set[str]:
        return await self.mailbox.mark_read([r["remote"] for r in rows])


async def _reconcile_send(ctx: ExecContext, args: MailSendArgs, store: ImapMessages) -> Reconciled:
    """In Sent: done. Still a draft: it may have gone out, unknown. Neither: it never started."""
    if ctx.idempotency_key is None:
        return Reconciled.unknown()
    state, found = await store.mailbox.sent_state(ctx.idempotency_key)
    if state == "sent" and found is not None:
        row = _sent_row(found) | {"body": args.body}
        return Reconciled.done(write_result("mail", "send", row, 1, f"Sent {quoted(args.subject)} to {', '.join(args.to)}.",
                                            id_kind=store.id_kind))
    return Reconciled.unknown() if state == "unknown" else Reconciled.not_done()


async def _reconcile_trash(ctx: ExecContext, args: MailTrashArgs, store: ImapMessages) -> Reconciled:
    """None left where they were: moved, done. All there: not done. Some: unknown."""
    ids = [i for i in dict.fromkeys(args.message_ids) if not i.startswith("imap_t_")]
    present = await store.mailbox.still_there(ids)
    if not present:
        item = {"message_ids": ids, "changed_ids": ids, "messages": []}
        return Reconciled.done(write_result("mail", "trash", item, len(ids), f"Moved {plural(len(ids), 'message')} "
                                            "to the trash."))
    return Reconciled.not_done() if len(present) == len(ids) else Reconciled.unknown()


async def _reconcile_mark_read(ctx: ExecContext, args: MailMarkReadArgs, store: ImapMessages) -> Reconciled:
    """All read: done (one STORE marks them together). Otherwise: not done."""
    rows = await store.received(ctx, list(dict.fromkeys(args.message_ids)))
    if all(r["is_read"] for r in rows):
        ids = [r["id"] for r in rows]
        item = {"message_ids": ids, "changed_ids": ids, "messages": []}
        return Reconciled.done(write_result("mail", "mark_read", item, len(ids),
                                            f"Marked {plural(len(ids), 'message')} as read."))
    return Reconciled.not_done()


def mail_for(settings: Mapping[str, Any] | None) -> ToolSpec:
    """The mail tool for ``settings``: the built-in one unless some owner is on IMAP."""
    values = settings or {}
    if backends_chosen(values, "mail") == {"builtin"}:
        return MAIL
    plaintext = frozenset(str(h) for h in values.get("connector_plaintext_hosts") or ())
    on_lan = private_network_owners(values, "imap")

    def on_imap(owner_id: str) -> bool:
        return backend_of(values, "mail", owner_id) == "imap"

    async def store_for(ctx: ExecContext) -> MailStore:
        if not on_imap(ctx.owner_id):
            return TABLE
        if ctx.credentials is None or ctx.http is None:
            raise MailAccountMissing()
        imap_url, smtp_url, username, password, address = [await ctx.credentials.get(n) for n in ACCOUNT_NAMES]
        if not (imap_url and smtp_url and username and password and address):
            raise MailAccountMissing()
        account = MailAccount(imap_url, smtp_url, username, password, address, plaintext,
                              private_network=ctx.owner_id in on_lan)
        return ImapMessages(ImapMailbox(ctx.http, account))

    runs = {"list": builtin.list_mail, "read": builtin.read_mail, "send": builtin.send_mail,
            "trash": builtin.trash_mail, "mark_read": builtin.mark_read}
    previews = {"send": builtin.preview_send, "trash": builtin.preview_trash}
    hooks = {"send": _reconcile_send, "trash": _reconcile_trash, "mark_read": _reconcile_mark_read}

    return on_stores(MAIL, store_for, runs, previews, on_server=on_imap, kind=IMAP_MAIL, hooks=hooks)
