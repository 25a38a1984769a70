"""A plug-in tool's ids on the real compiled graph: kinds as data, paths, what the thread may bind.

The ``files`` tool below is written only with the public tool API (``tools``), keeps its data
in memory (it asks for no database connection) and records the arguments each executor got.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from tollgate.graph.runner import TurnRunner
from tollgate.graph.services import Services
from tollgate.graph.state import Context
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.turn import build_graph
from tests.fakes import ScriptedModel, call, say
from tests.harness import Turns, what_runs
from tollgate.tools import ActionResult, ActionSpec, ArgsModel, ExecContext, IdRef, SafeText, ToolSpec, template_preview
from tollgate.tools.builtin import builtin_tools
from tollgate.tools.registry import IdKind, Registry

FILES = [str(n) for n in range(12)]  # ids "0".."11": numbers, listed in order
PEOPLE = ["emma.lee@example.com", "sam@example.org"]
CHANNELS = ["#general", "#2", "random talk\n\n"]  # a channel called "#2"; a name ending in newlines


class _Ref(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    file_id: IdRef


class _Item(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    file_id: IdRef
    note: SafeText(100, min_length=0) = ""


class ListArgs(ArgsModel):
    what: str = Field(default="files", pattern="^(files|people|channels)$")


class GetArgs(ArgsModel):
    file_id: IdRef


class CreateArgs(ArgsModel):
    name: SafeText(100)


class ShareArgs(ArgsModel):
    share: _Ref
    people: list[IdRef] = Field(min_length=1, max_length=5)


class TagArgs(ArgsModel):
    items: list[_Item] = Field(min_length=1, max_length=10)


class PostArgs(ArgsModel):
    channel: IdRef
    text: SafeText(500, min_length=0)


class FilesTool:
    """The tool's executors, over an in-memory store; ``calls`` records what each one received."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.created = 0

    def _record(self, action: str, args: BaseModel) -> None:
        self.calls.append((action, args.model_dump(mode="json")))

    async def list(self, ctx: ExecContext, args: ListArgs) -> ActionResult:
        assert ctx.conn is None  # a tool that asked for no database gets none
        ids, kind = {"files": (FILES, "file"), "people": (PEOPLE, "person"), "channels": (CHANNELS, "channel")}[args.what]
        return ActionResult(tool="files", action="list", kind="list", list_kind=kind, summary=f"{len(ids)} {args.what}.",
                            rows=[{"id": i, "label": f"{args.what} {i!r}"} for i in ids])

    async def get(self, ctx: ExecContext, args: GetArgs) -> ActionResult:
        self._record("get", args)
        return ActionResult(tool="files", action="get", kind="item", summary="A file.", item={"id": args.file_id})

    async def create(self, ctx: ExecContext, args: CreateArgs) -> ActionResult:
        self._record("create", args)
        self.created += 1
        return ActionResult(tool="files", action="create", kind="write", summary=f"Created {args.name}.", changed=1,
                            item_kind="file", item={"id": str(100 + self.created), "name": args.name})

    async def write(self, ctx: ExecContext, args: BaseModel) -> ActionResult:
        action = type(args).__name__.removesuffix("Args").lower()
        self._record(action, args)
        return ActionResult(tool="files", action=action, kind="write", summary="Done.", changed=1)

    def spec(self) -> ToolSpec:
        def action(name: str, args: type[ArgsModel], executor: Any, **kw: Any) -> ActionSpec:
            return ActionSpec(name=name, description=f"{name.capitalize()} files.", args=args, executor=executor,
                              renderer=lambda r: r["summary"], usage_examples=(f"{name} a file",), **kw)

        return ToolSpec(
            name="files", description="Files.", capability_phrase="manage files",
            id_kinds=(
                IdKind("file", pattern=r"[0-9]{1,9}"),
                IdKind("person", pattern=r"[^\s@]+@[^\s@]+\.[^\s@]+", noun="person"),
                IdKind("channel", pattern=r"#?[A-Za-z0-9 ._\n-]{1,80}", positions=False),
            ),
            actions=(
                action("list", ListArgs, self.list, tier="allowlist"),
                # An item read carries its id back with its kind (as an item_kind would say).
                action("get", GetArgs, self.get_with_kind, tier="allowlist", id_fields={"file_id": "file"}),
                action("create", CreateArgs, self.create, tier="allowlist", effect="write"),
                action("share", ShareArgs, self.write, tier="confirmation", effect="write",
                       preview=template_preview("Share {share[file_id]:label} with {people:label}"),
                       id_fields={"share.file_id": "file", "people": "person"}),
                action("tag", TagArgs, self.write, tier="allowlist", effect="write", id_fields={"items[].file_id": "file"}),
                action("post", PostArgs, self.write, tier="allowlist", effect="write", id_fields={"channel": "channel"}),
            ),
        )

    async def get_with_kind(self, ctx: ExecContext, args: GetArgs) -> ActionResult:
        result = await self.get(ctx, args)
        result["item_kind"] = "file"
        return result


@pytest.fixture
def files() -> FilesTool:
    return FilesTool()


@pytest.fixture
async def files_turns(services: Services, db: Database, files: FilesTool) -> Turns:
    registry = Registry((*builtin_tools(), files.spec()))
    svc = replace(services, registry=registry)
    return Turns(TurnRunner(build_graph(svc, checkpointer=await open_checkpointer(db)), svc))


async def _list(turns: Turns, model: ScriptedModel, ctx: Context, thread: str, what: str = "files") -> None:
    model.push(call("files__list", {"what": what}), say(""))
    assert (await turns.send(ctx, thread, f"list {what}")).outcome == "read"


def _refusal(out: Any) -> Any:
    errors = [e["data"] for e in out.events if e["type"] == "error"]
    return errors[0] if errors else None


async def test_a_numeric_id_is_the_id_not_a_position(
    files_turns: Turns, files: FilesTool, model: ScriptedModel, ctx: Context
) -> None:
    thread = ctx.owner_id + "/numeric"
    await _list(files_turns, model, ctx, thread)
    model.push(call("files__tag", {"items": [{"file_id": "11"}]}))
    out = await files_turns.send(ctx, thread, "tag file 11")
    assert out.outcome == "executed"
    assert files.calls[-1] == ("tag", {"items": [{"file_id": "11", "note": ""}]})  # file "11", not row 11 ("10")
    model.push(call("files__tag", {"items": [{"file_id": "#11"}]}))
    await files_turns.send(ctx, thread, "tag the 11th")
    assert files.calls[-1] == ("tag", {"items": [{"file_id": "10", "note": ""}]})


async def test_nested_id_fields_bind_all_or_nothing(
    files_turns: Turns, files: FilesTool, model: ScriptedModel, ctx: Context
) -> None:
    thread = ctx.owner_id + "/nested"
    await _list(files_turns, model, ctx, thread)
    model.push(call("files__tag", {"items": [{"file_id": "#1", "note": "a"}, {"file_id": "999"}]}))
    out = await files_turns.send(ctx, thread, "tag these")
    assert out.outcome == "clarify" and _refusal(out)["reason"] == "not_returned"
    assert [c for c in files.calls if c[0] == "tag"] == []
    model.push(call("files__tag", {"items": [{"file_id": "#1", "note": "a"}, {"file_id": "7"}]}))
    assert (await files_turns.send(ctx, thread, "tag these")).outcome == "executed"
    assert files.calls[-1] == ("tag", {"items": [{"file_id": "0", "note": "a"}, {"file_id": "7", "note": ""}]})


async def test_ids_with_at_signs_dots_and_spaces_per_their_kind(
    files_turns: Turns, files: FilesTool, model: ScriptedModel, ctx: Context
) -> None:
    thread = ctx.owner_id + "/shapes"
    await _list(files_turns, model, ctx, thread)
    await _list(files_turns, model, ctx, thread, "people")
    model.push(call("files__share", {"share": {"file_id": "3"}, "people": ["emma.lee@example.com", "#2"]}))
    out = await files_turns.send(ctx, thread, "share file 3 with emma and sam")
    assert out.approval is not None  # the reviewer reads what the lists showed, not bare ids
    assert what_runs(out.approval.preview) == "Share files '3' with people 'emma.lee@example.com', people 'sam@example.org'"
    done = await files_turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed"
    assert files.calls[-1] == ("share", {"share": {"file_id": "3"}, "people": ["emma.lee@example.com", "sam@example.org"]})
    model.push(call("files__share", {"share": {"file_id": "3"}, "people": ["not an address"]}))
    out = await files_turns.send(ctx, thread, "share it with them")
    assert out.outcome == "clarify" and _refusal(out)["reason"] == "bad_id"


async def test_a_kind_without_positions_binds_hash_names_and_keeps_whitespace(
    files_turns: Turns, files: FilesTool, model: ScriptedModel, ctx: Context
) -> None:
    thread = ctx.owner_id + "/channels"
    await _list(files_turns, model, ctx, thread, "channels")
    model.push(call("files__post", {"channel": "#2", "text": ""}))
    assert (await files_turns.send(ctx, thread, "post nothing to #2")).outcome == "executed"
    assert files.calls[-1] == ("post", {"channel": "#2", "text": ""})  # the channel named "#2"; "" where allowed
    model.push(call("files__post", {"channel": "random talk\n\n", "text": "  hi  "}))
    assert (await files_turns.send(ctx, thread, "post hi in random talk files")).outcome == "executed"
    assert files.calls[-1] == ("post", {"channel": "random talk\n\n", "text": "  hi  "})  # exactly as sent


async def test_created_and_read_items_bind_and_an_earlier_list_survives_another_read(
    files_turns: Turns, files: FilesTool, model: ScriptedModel, ctx: Context
) -> None:
    thread = ctx.owner_id + "/bound"
    model.push(call("files__create", {"name": "packing list"}))
    assert (await files_turns.send(ctx, thread, "create the packing list")).outcome == "executed"
    model.push(call("files__tag", {"items": [{"file_id": "101"}]}))
    assert (await files_turns.send(ctx, thread, "and tag it")).outcome == "executed"  # the item just created
    assert files.calls[-1] == ("tag", {"items": [{"file_id": "101", "note": ""}]})
    await _list(files_turns, model, ctx, thread)
    await _list(files_turns, model, ctx, thread, "people")  # another read: a list of another kind
    await _list(files_turns, model, ctx, thread)  # and the same kind again
    model.push(call("files__tag", {"items": [{"file_id": "101"}, {"file_id": "5"}]}))
    assert (await files_turns.send(ctx, thread, "tag both")).outcome == "executed"
    model.push(call("files__tag", {"items": [{"file_id": "102"}]}))  # never returned by the server
    out = await files_turns.send(ctx, thread, "tag 102")
    assert out.outcome == "clarify" and _refusal(out)["reason"] == "not_returned"
