"""Approval previews: made from the arguments alone without the store, or from one read-only snapshot."""

from __future__ import annotations

from tollgate.graph.services import Services
from tollgate.graph.state import Context
from tollgate.graph.store.db import Database
from tollgate.nodes.propose import _render_preview
from tollgate.tools.args import CalendarCancelArgs, TaskCreateArgs

from tests.conftest import all_rows


def _pool_requests(db: Database) -> int:
    return int(db.pool.get_stats().get("requests_num", 0))


async def test_a_preview_from_the_arguments_alone_touches_no_connection(services: Services, ctx: Context, db: Database) -> None:
    spec = services.registry.action("tasks", "create")
    assert spec is not None
    before = _pool_requests(db)
    text = await _render_preview(spec, TaskCreateArgs(title="Water the plants"), ctx, services, tool="tasks", database=True)
    assert text == "Add the task “Water the plants”"
    assert _pool_requests(db) == before


async def test_a_preview_that_reads_the_store_gets_a_snapshot(services: Services, ctx: Context, db: Database) -> None:
    async with all_rows(db) as conn:
        cur = await conn.execute(
            "SELECT id FROM calendar_events WHERE owner_id = %s AND title = 'Standup'", (ctx.owner_id,)
        )
        event_id = (await cur.fetchone())["id"]
    spec = services.registry.action("calendar", "cancel_event")
    assert spec is not None
    before = _pool_requests(db)
    text = await _render_preview(spec, CalendarCancelArgs(event_id=event_id), ctx, services, tool="calendar", database=True)
    assert text.startswith("Cancel “Standup” on ")
    assert _pool_requests(db) == before + 1  # one connection, for its read-only transaction
