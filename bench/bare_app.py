"""P8's baseline: a bare FastAPI + ``create_agent`` + ``AsyncPostgresSaver`` chat app.

What a developer would write without Tollgate: one ``POST /chat`` that runs a LangChain agent
with one calendar tool (the same store read Tollgate's ``calendar.list`` makes) on the same
model endpoint (``OPENAI_BASE_URL``) and the same PostgreSQL (``DATABASE_URL``), with LangGraph's
own saver over a connection pool. No governance, no event log, no leases: the floor Tollgate is
measured against. ``python -m uvicorn bench.bare_app:app --port N`` serves it.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import tollgate.graph._env  # noqa: F401 - strict msgpack and no telemetry before langgraph loads
from fastapi import FastAPI
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, SecretStr

from tollgate.graph.store.owner_scope import owner_transaction
from tollgate.tools.args import CalendarListArgs
from tollgate.tools.builtin import default_registry
from tollgate.tools.calendar import CALENDAR, list_events
from tollgate.tools.registry import ExecContext

__all__ = ["app"]


class ChatIn(BaseModel):
    """One message of one owner's thread."""

    owner: str
    thread_id: str
    message: str


@asynccontextmanager
async def _lifespan(api: FastAPI) -> AsyncIterator[None]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        os.environ["DATABASE_URL"], min_size=1, max_size=20, open=False,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    )
    await pool.open(wait=True)
    model = ChatOpenAI(model="bench-model", base_url=os.environ["OPENAI_BASE_URL"], api_key=SecretStr("not-needed"),
                       max_retries=0, timeout=120)
    api.state.pool = pool
    api.state.agent = create_agent(model, tools=_tools(api), checkpointer=AsyncPostgresSaver(conn=pool))
    try:
        yield
    finally:
        await pool.close()


app = FastAPI(lifespan=_lifespan)


_owner: ContextVar[str] = ContextVar("bench_owner")
"""The caller of the request being served (the agent is built once; its tools read this)."""


def _tools(api: FastAPI) -> list[StructuredTool]:
    """The same functions Tollgate's picker is offered (so both send the model the same schemas);
    only ``calendar__list`` runs, the store read Tollgate's makes."""

    async def calendar__list(**kwargs: Any) -> str:
        async with owner_transaction(api.state.pool, _owner.get()) as conn:
            ctx = ExecContext(_owner.get(), "UTC", datetime.now(UTC), conn)
            result = await list_events(ctx, CalendarListArgs(**kwargs))
        return CALENDAR.actions[0].renderer(result)

    async def unavailable(**_kwargs: Any) -> str:
        return "not available in this benchmark"

    out = []
    for schema in default_registry().function_schemas():
        function = schema["function"]
        spec = default_registry().lookup(function["name"])
        assert spec is not None
        out.append(StructuredTool.from_function(
            coroutine=calendar__list if function["name"] == "calendar__list" else unavailable,
            name=function["name"], description=function["description"], args_schema=spec[1].args,
        ))
    return out





@app.post("/chat")
async def chat(body: ChatIn) -> dict[str, str]:
    """Run one turn; the reply."""
    _owner.set(body.owner)
    out = await app.state.agent.ainvoke({"messages": [HumanMessage(body.message)]},
                              {"configurable": {"thread_id": body.thread_id}})
    return {"reply": str(out["messages"][-1].content)}


@app.get("/ok")
async def ok() -> dict[str, str]:
    """Ready."""
    return {"status": "ok"}
