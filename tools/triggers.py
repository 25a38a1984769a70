"""The triggers tool: rules that start a background run when a mail arrives or an event nears.

* ``create`` waits for approval. Its matcher is validated before anything else: a mail rule
  names a sender as an exact address or ``@domain`` (optionally a subject substring); an event
  rule names a title substring and a lead time. Too-broad rules are refused: a whole public
  mail provider without a subject filter, wildcards or display names, substrings shorter than
  three characters. The schema the model sees states all of it except the provider list.
* A rule is *armed* when it is created (after approval): it never fires for mail that arrived,
  or an event moment that passed, before then.
* ``list`` reads; ``cancel`` is soft (the row stays, ``status = 'cancelled'``), reversible in
  the store and free of approval like marking mail read.

The evaluator that fires rules lives in :mod:`graph.background.triggers`.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import Field, StringConstraints, model_validator

from tollgate.policies.arguments import ArgsModel, Count, IdRef, SafeText
from tollgate.policies.errors import NotFound
from tollgate.tools._ids import new_id
from tollgate.tools._render import (
    clip,
    count_summary,
    fetch_all,
    fetch_one,
    list_result,
    quoted,
    render_list,
    render_summary,
    write_result,
)
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, ResultRow, ToolSpec

__all__ = [
    "PUBLIC_MAIL_DOMAINS",
    "SENDER_PATTERN",
    "TRIGGERS",
    "EventMatch",
    "MailMatch",
    "TriggerCancelArgs",
    "TriggerCreateArgs",
    "TriggerListArgs",
    "cancel_trigger",
    "create_trigger",
    "describe_rule",
    "list_triggers",
    "preview_create_trigger",
]

_TOOL: Final = "triggers"
_KIND: Final = "trigger"
_COLUMNS: Final = (
    "id, kind, sender, subject_contains, title_contains, lead_minutes, instruction, status, armed_at, cancelled_at"
)
# An exact address or '@domain', with a deliberately plain local part (no '*', '?' or '%' that
# could read as a wildcard); the model sees this pattern in the schema.
SENDER_PATTERN: Final = (
    r"^[A-Za-z0-9._+-]{0,64}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}$"
)

PUBLIC_MAIL_DOMAINS: Final = frozenset({
    "gmail.com", "googlemail.com", "outlook.com", "hotmail.com", "live.com", "msn.com", "yahoo.com",
    "ymail.com", "icloud.com", "me.com", "mac.com", "aol.com", "proton.me", "protonmail.com", "gmx.com",
    "gmx.de", "gmx.net", "web.de", "mail.com", "yandex.com", "yandex.ru", "zoho.com", "fastmail.com",
    "hey.com", "tutanota.com", "qq.com", "163.com",
})
"""Domains shared by millions of senders: an ``@domain`` rule on one needs a subject filter."""


class MailMatch(ArgsModel):
    """Fire on an arriving mail from a sender."""

    kind: Literal["mail"]
    sender: Annotated[str, StringConstraints(min_length=4, max_length=254, pattern=SENDER_PATTERN)] = Field(
        description="An exact address ('sam@example.com') or a whole domain ('@example.com')."
    )
    subject_contains: SafeText(100, min_length=3) | None = Field(
        default=None, description="Optional: only mail whose subject contains this text."
    )


class EventMatch(ArgsModel):
    """Fire some minutes before a calendar event whose title matches."""

    kind: Literal["event"]
    title_contains: SafeText(100, min_length=3) = Field(description="Events whose title contains this text.")
    lead_minutes: Count(5, 1440) = Field(default=30, description="How many minutes before the event to act.")


class TriggerCreateArgs(ArgsModel):
    """Create a trigger rule (after approval)."""

    match: MailMatch | EventMatch = Field(description="What fires the rule: a mail, or an upcoming event.")
    instruction: SafeText(1000) = Field(description="What to do when the rule fires, as a request.")

    @model_validator(mode="after")
    def _not_too_broad(self) -> TriggerCreateArgs:
        match = self.match
        if isinstance(match, MailMatch) and match.sender.startswith("@") and match.subject_contains is None:
            if match.sender[1:].lower() in PUBLIC_MAIL_DOMAINS:
                raise ValueError("too broad: a whole public mail provider; name an exact address or add a subject filter")
        return self


class TriggerListArgs(ArgsModel):
    """List trigger rules."""

    status: Literal["active", "all"] = "active"
    limit: Count(1, 50) = Field(default=20, description="Maximum number of rules.")


class TriggerCancelArgs(ArgsModel):
    """Cancel (soft) a rule from the latest trigger list."""

    trigger_id: IdRef = Field(description="A rule id or position ('#1') from the latest trigger list.")


def describe_rule(row: dict[str, Any] | MailMatch | EventMatch) -> str:
    """``mail from sam@example.com with “invoice” in the subject`` / ``30 min before events titled “Standup”``."""
    get = row.get if isinstance(row, dict) else (lambda name: getattr(row, name, None))
    if get("kind") == "mail":
        text = f"mail from {str(get('sender')).lower()}"
        subject = get("subject_contains")
        return text + (f" with {quoted(str(subject), 60)} in the subject" if subject else "")
    return f"{get('lead_minutes')} min before events titled {quoted(str(get('title_contains')), 60)}"


def _label(row: dict[str, Any]) -> str:
    text = f"When {describe_rule(row)}: {quoted(row['instruction'], 60)}"
    return text + (" (cancelled)" if row["status"] == "cancelled" else "")


async def list_triggers(ctx: ExecContext, args: TriggerListArgs) -> ActionResult:
    """Active (or all) rules, newest first."""
    where = " AND status = 'active'" if args.status == "active" else ""
    rows = await fetch_all(
        ctx,
        f"SELECT {_COLUMNS} FROM trigger_rules WHERE owner_id = %s{where} ORDER BY created_at DESC, id LIMIT %s",
        (ctx.owner_id, args.limit + 1),
    )
    noun = "active trigger rule" if args.status == "active" else "trigger rule"
    shown, summary = count_summary(rows, args.limit, noun, order="newest")
    result_rows: list[ResultRow] = [{"id": r["id"], "label": _label(r)} for r in shown]
    return list_result(_TOOL, "list", "triggers", result_rows, summary)


async def preview_create_trigger(ctx: ExecContext, args: TriggerCreateArgs) -> str:
    """``When mail from sam@example.com arrives, run “summarize it” in the background (from now on)``."""
    when = f"When {describe_rule(args.match)}" + (" arrives" if args.match.kind == "mail" else "")
    return f"{when}, run {quoted(args.instruction)} in the background (from approval on; nothing earlier counts)"


async def create_trigger(ctx: ExecContext, args: TriggerCreateArgs) -> ActionResult:
    """Insert an active rule armed now."""
    m = args.match
    row = await fetch_one(
        ctx,
        "INSERT INTO trigger_rules (id, owner_id, kind, sender, subject_contains, title_contains, lead_minutes,"
        " instruction, armed_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
        f" RETURNING {_COLUMNS}",
        (
            new_id("trg"), ctx.owner_id, m.kind, m.sender.lower() if isinstance(m, MailMatch) else None,
            m.subject_contains if isinstance(m, MailMatch) else None,
            m.title_contains if isinstance(m, EventMatch) else None,
            m.lead_minutes if isinstance(m, EventMatch) else None, args.instruction, ctx.now,
        ),
    )
    assert row is not None  # INSERT ... RETURNING always yields the row
    summary = f"Armed a trigger: when {describe_rule(row)}, I will run {quoted(row['instruction'])} in the background."
    return write_result(_TOOL, "create", row, 1, summary)


async def cancel_trigger(ctx: ExecContext, args: TriggerCancelArgs) -> ActionResult:
    """Soft-cancel an active rule; a cancelled one is left as it is."""
    row = await fetch_one(
        ctx, f"SELECT {_COLUMNS} FROM trigger_rules WHERE owner_id = %s AND id = %s FOR UPDATE",
        (ctx.owner_id, args.trigger_id),
    )
    if row is None:
        raise NotFound(_KIND, args.trigger_id)
    if row["status"] == "cancelled":
        return write_result(_TOOL, "cancel", row, 0, f"The trigger “{clip(describe_rule(row), 60)}” was already cancelled.")
    updated = await fetch_one(
        ctx,
        "UPDATE trigger_rules SET status = 'cancelled', cancelled_at = %s WHERE owner_id = %s AND id = %s"
        f" RETURNING {_COLUMNS}",
        (ctx.now, ctx.owner_id, row["id"]),
    )
    assert updated is not None  # the row is locked above
    return write_result(_TOOL, "cancel", updated, 1, f"Cancelled the trigger for {describe_rule(updated)}.")


TRIGGERS = ToolSpec(
    database=True,
    name=_TOOL,
    description="Rules that start a background run when a mail arrives or before an event.",
    capability_phrase="watch for mail or upcoming events and act on them in the background",
    actions=(
        ActionSpec(
            name="list",
            description="List your trigger rules.",
            args=TriggerListArgs,
            tier="allowlist",
            executor=list_triggers,
            renderer=render_list,
            usage_examples=("What triggers do I have?", "Show my rules", "List all my trigger rules, old ones too"),
        ),
        ActionSpec(
            name="create",
            description="Create a rule: on mail from a sender (or @domain), or N minutes before matching events, run a request in the background (after your approval).",
            args=TriggerCreateArgs,
            tier="confirmation",
            executor=create_trigger,
            renderer=render_summary,
            preview=preview_create_trigger,
            idempotent=False,
            effect="write",
            usage_examples=(
                "When Sam emails me, summarize it",
                "Whenever mail from @example.net with 'invoice' in the subject arrives, add a task to pay it",
                "30 minutes before any standup, list my open tasks",
            ),
        ),
        ActionSpec(
            name="cancel",
            description="Cancel a rule from the latest trigger list (it is kept, switched off).",
            args=TriggerCancelArgs,
            tier="allowlist",
            executor=cancel_trigger,
            renderer=render_summary,
            id_fields={"trigger_id": "triggers"},
            effect="write",
            usage_examples=("Cancel the Sam trigger", "Stop rule #2", "Turn off the standup trigger"),
        ),
    ),
)
"""The triggers tool."""
