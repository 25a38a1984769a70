"""Prometheus metrics of one Tollgate process (prometheus-client).

Counted as things happen: turns by outcome, model calls (latency by provider and role, errors
by provider and kind), tool calls (latency by tool and outcome), thread leases waited on.
Read from the database when scraped (:func:`refresh`): approvals by state, background runs by
state, the job queue by status; and the pool's connections from the pool itself.

Labels are names, never values: tool and provider names come from the registry and the
settings, outcomes from a fixed vocabulary. Served on ``/metrics`` to the admin scope, or on
``TOLLGATE_METRICS_PORT`` (``web/routes_metrics.py``).
"""

from __future__ import annotations

import logging
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tollgate.graph.store import owner_scope

__all__ = [
    "APPROVALS", "BACKGROUND_RUNS", "CONTENT_TYPE", "LEASE_WAITS", "MODEL_CALLS", "MODEL_ERRORS", "POOL", "QUEUE_JOBS",
    "REGISTRY", "TOOL_CALLS", "TURNS", "exposition", "refresh",
]

_log = logging.getLogger("tollgate.metrics")

REGISTRY: Final = CollectorRegistry(auto_describe=True)
"""This process's metrics (not the client library's global registry: nothing else lands in it)."""
CONTENT_TYPE: Final = CONTENT_TYPE_LATEST

# Model and tool calls take from milliseconds (a local read) to a minute (a slow provider).
_SECONDS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

TURNS: Final = Counter("tollgate_turns", "Runs of the turn graph, by how they ended", ["outcome"], registry=REGISTRY)
MODEL_CALLS: Final = Histogram("tollgate_model_call_seconds", "Model calls, by provider and role",
                               ["provider", "role", "outcome"], buckets=_SECONDS, registry=REGISTRY)
MODEL_ERRORS: Final = Counter("tollgate_model_errors", "Failed model provider calls, by provider and error kind",
                              ["provider", "kind"], registry=REGISTRY)
TOOL_CALLS: Final = Histogram("tollgate_tool_call_seconds", "Tool calls run, by tool and outcome",
                              ["tool", "outcome"], buckets=_SECONDS, registry=REGISTRY)
LEASE_WAITS: Final = Histogram("tollgate_lease_wait_seconds",
                               "Turns that found their thread held by another turn: how long they waited, and whether they got it",
                               ["outcome"], buckets=_SECONDS, registry=REGISTRY)
POOL: Final = Gauge("tollgate_db_pool_connections", "Database pool connections, by state", ["state"],
                    registry=REGISTRY)
APPROVALS: Final = Gauge("tollgate_approvals", "Approval requests, by state", ["state"], registry=REGISTRY)
BACKGROUND_RUNS: Final = Gauge("tollgate_background_runs", "Background runs, by state", ["state"], registry=REGISTRY)
QUEUE_JOBS: Final = Gauge("tollgate_queue_jobs", "Jobs of the background queue, by status (todo: its depth)",
                          ["status"], registry=REGISTRY)

_APPROVAL_STATES: Final = ("pending", "approved", "executing", "executed", "rejected", "expired", "failed",
                           "superseded", "refused")
_RUN_STATES: Final = ("queued", "running", "awaiting_approval", "succeeded", "failed", "cancelled")
_JOB_STATUSES: Final = ("todo", "doing", "succeeded", "failed", "cancelled", "aborted")
_COUNTS_SQL: Final = """
SELECT 'approvals' AS what, status, count(*) AS n FROM approvals WHERE approval_id = request_id GROUP BY status
UNION ALL SELECT 'runs', status, count(*) FROM background_runs GROUP BY status"""
# The job queue's schema is made by the first worker: a server without one has no queue yet.
_JOBS_SQL: Final = "SELECT 'jobs' AS what, status::text AS status, count(*) AS n FROM procrastinate_jobs GROUP BY status"


async def refresh(pool: Any) -> None:
    """Read the gauges that live in the database (one statement) and the pool's own counts.

    A state with no rows reads 0 (a gauge that vanished would look like a scrape gap). A
    database that does not answer leaves the database gauges as they were and is logged."""
    stats = pool.get_stats()
    size, idle = stats.get("pool_size", 0), stats.get("pool_available", 0)
    POOL.labels("in_use").set(size - idle)
    POOL.labels("idle").set(idle)
    POOL.labels("waiting").set(stats.get("requests_waiting", 0))
    POOL.labels("max").set(pool.max_size)
    try:
        async with pool.connection(timeout=2) as conn, conn.transaction():
            await owner_scope.all_owners(conn)
            cur = await conn.execute(_COUNTS_SQL)
            rows = await cur.fetchall()
            present = await conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL AS present")
            if (await present.fetchone() or {}).get("present"):
                rows += await (await conn.execute(_JOBS_SQL)).fetchall()
    except Exception as exc:  # noqa: BLE001 - a scrape during an outage still answers with the rest
        _log.warning("metrics: the database did not answer (%s)", type(exc).__name__)
        return
    counts: dict[tuple[str, str], int] = {(str(r["what"]), str(r["status"])): int(r["n"]) for r in rows}
    for gauge, what, states in ((APPROVALS, "approvals", _APPROVAL_STATES), (BACKGROUND_RUNS, "runs", _RUN_STATES),
                                (QUEUE_JOBS, "jobs", _JOB_STATUSES)):
        for state in {*states, *(s for w, s in counts if w == what)}:
            gauge.labels(state).set(counts.get((what, state), 0))


def exposition() -> bytes:
    """The metrics in Prometheus' text format."""
    return generate_latest(REGISTRY)

