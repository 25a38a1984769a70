"""An example Tollgate plug-in: bookmarks, one read and one write, on Tollgate's public tool API.

Everything here is public API (``tools``): the argument models are closed and bounded
(``ArgsModel``, ``SafeText``), the write declares its effect and waits for approval
(``tier="confirmation"`` with a preview), and identity comes from ``ExecContext.owner_id``.
"""

from __future__ import annotations

import secrets
from typing import Annotated

from pydantic import Field, StringConstraints

from tollgate.tools import ActionResult, ActionSpec, ArgsModel, Count, ExecContext, SafeText, ToolSpec

__all__ = ["BOOKMARKS", "TOOLS"]

Url = Annotated[str, StringConstraints(min_length=8, max_length=2000, pattern=r"^https://[^\s]+$")]


class ListArgs(ArgsModel):
    """List saved bookmarks, newest first."""

    contains: SafeText(100) | None = Field(default=None, description="Only bookmarks whose title contains this.")
    limit: Count(1, 50) = Field(default=10, description="Maximum number of bookmarks.")


class SaveArgs(ArgsModel):
    """Save a link."""

    title: SafeText(200) = Field(description="A title for the link.")
    url: Url = Field(description="The https:// address.")


async def list_bookmarks(ctx: ExecContext, args: ListArgs) -> ActionResult:
    cur = await ctx.db.execute(
        "SELECT id, title, url FROM example_bookmarks WHERE owner_id = %s AND (%s::text IS NULL OR "
        "position(lower(%s::text) in lower(title)) > 0) ORDER BY created_at DESC, id LIMIT %s",
        (ctx.owner_id, args.contains, args.contains, args.limit),
    )
    rows = await cur.fetchall()
    return ActionResult(
        tool="bookmarks", action="list", kind="list", list_kind="bookmarks",
        summary=f"{len(rows)} bookmark{'s' if len(rows) != 1 else ''}.",
        rows=[{"id": r["id"], "label": f"{r['title']} ({r['url']})"} for r in rows],
    )


async def save_bookmark(ctx: ExecContext, args: SaveArgs) -> ActionResult:
    new_id = "bm_" + secrets.token_hex(5)
    await ctx.db.execute(
        "INSERT INTO example_bookmarks (id, owner_id, title, url, created_at) VALUES (%s, %s, %s, %s, %s)",
        (new_id, ctx.owner_id, args.title, args.url, ctx.now),
    )
    return ActionResult(
        tool="bookmarks", action="save", kind="write", changed=1, item_kind="bookmarks",
        summary=f"Saved the bookmark '{args.title}'.", item={"id": new_id, "title": args.title, "url": args.url},
    )


async def preview_save(ctx: ExecContext, args: SaveArgs) -> str:
    return f"Save the bookmark '{args.title}' ({args.url})."


def _render_list(result: ActionResult) -> str:
    rows = result.get("rows", [])
    if not rows:
        return "You have no bookmarks yet."
    return "Your bookmarks:\n" + "\n".join(f"{i}. {row['label']}" for i, row in enumerate(rows, 1))


BOOKMARKS = ToolSpec(
    name="bookmarks",
    description="Your saved links.",
    capability_phrase="save and list your bookmarks",
    database=True,
    migrations=(
        """CREATE TABLE IF NOT EXISTS example_bookmarks (
               id text PRIMARY KEY, owner_id text NOT NULL, title text NOT NULL, url text NOT NULL,
               created_at timestamptz NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS example_bookmarks_owner ON example_bookmarks (owner_id, created_at DESC)",
        # Row-level security as on the built-in tables: a query that forgets its owner sees nothing.
        "SELECT tollgate_owner_rls('example_bookmarks')",
    ),
    actions=(
        ActionSpec(
            name="list",
            description="List your saved bookmarks, newest first.",
            args=ListArgs,
            tier="allowlist",
            executor=list_bookmarks,
            renderer=_render_list,
            usage_examples=("Show my bookmarks", "Which links did I save?", "Find my bookmark about pasta"),
        ),
        ActionSpec(
            name="save",
            description="Save a link as a bookmark (after your approval).",
            args=SaveArgs,
            tier="confirmation",
            effect="write",
            idempotent=False,
            executor=save_bookmark,
            renderer=lambda result: result["summary"],
            preview=preview_save,
            usage_examples=("Bookmark https://example.com/pasta as pasta recipe", "Save this link: https://example.org",
                            "Keep https://docs.example.com for later"),
        ),
    ),
)
"""The bookmarks tool."""

TOOLS = (BOOKMARKS,)
"""What the ``tollgate.tools`` entry point serves."""
