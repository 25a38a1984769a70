"""Owners' tool secrets: encrypted at rest, read by the tool of the owner its call acts for, never shown."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from tollgate.graph._env import child_environment
from tollgate.graph.perimeter.credentials import CredentialStore, CredentialsUnavailable, credentials_cipher
from tollgate.graph.runner import TurnRunner
from tollgate.graph.services import Services
from tollgate.graph.settings import Settings
from tollgate.graph.state import Context
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tollgate.graph.turn import build_graph
from tests.conftest import all_rows
from tests.fakes import ScriptedModel, call, say
from tests.harness import Turns
from tollgate.tools import ActionResult, ActionSpec, ArgsModel, ExecContext, ToolSpec
from tollgate.tools.builtin import builtin_tools
from tollgate.tools.registry import Registry

_TOLLGATE = str(Path(sys.executable).with_name("tollgate"))
SECRET = "tok_live_8f3a9b2c7d1e"


def _store(db: Database, settings: Settings) -> CredentialStore:
    return CredentialStore(db.pool, credentials_cipher(settings, settings.approval_key()))


async def test_a_secret_is_encrypted_at_rest_and_read_back_only_for_its_owner_and_tool(
    db: Database, settings: Settings, owner: str
) -> None:
    store = _store(db, settings)
    await store.set(owner, "crm", "api_token", SECRET)
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT ciphertext FROM owner_credentials WHERE owner_id = %s", (owner,))
        row = await cur.fetchone()
    assert row is not None and SECRET.encode() not in bytes(row["ciphertext"])
    assert await store.bound(owner, "crm").get("api_token") == SECRET
    assert await store.bound(owner, "mail").get("api_token") is None  # another tool's secrets are not its own
    assert await store.bound(owner + "x", "crm").get("api_token") is None
    assert await store.names(owner) == [("crm", "api_token")]
    assert SECRET not in repr(store) and SECRET not in repr(store.bound(owner, "crm"))


async def test_a_key_that_does_not_open_a_secret_is_a_typed_error_without_the_value(
    db: Database, settings: Settings, owner: str
) -> None:
    await _store(db, settings).set(owner, "crm", "api_token", SECRET)
    other = settings.model_copy(update={"credentials_key": SecretStr(Fernet.generate_key().decode())})
    with pytest.raises(CredentialsUnavailable) as refused:
        await _store(db, other).bound(owner, "crm").get("api_token")
    assert SECRET not in str(refused.value) and "another key" in refused.value.message
    production = settings.model_copy(update={"environment": "production"})
    with pytest.raises(CredentialsUnavailable, match="credentials store"):
        await _store(db, production).set(owner, "crm", "api_token", SECRET)


async def test_a_tool_reads_its_owners_secret_through_the_exec_context(
    services: Services, db: Database, settings: Settings, model: ScriptedModel, ctx: Context
) -> None:
    seen: list[str | None] = []

    class NoArgs(ArgsModel):
        pass

    async def whoami(exec_ctx: ExecContext, args: NoArgs) -> ActionResult:
        assert exec_ctx.credentials is not None
        seen.append(await exec_ctx.credentials.get("api_token"))
        return ActionResult(tool="crm", action="whoami", kind="item", summary="Checked.")

    crm = ToolSpec(name="crm", description="A CRM.", capability_phrase="use the CRM", actions=(
        ActionSpec(name="whoami", description="Who am I in the CRM.", args=NoArgs, tier="allowlist", executor=whoami,
                   renderer=lambda r: r["summary"], usage_examples=("who am I in the crm",)),))
    svc = replace(services, registry=Registry((*builtin_tools(), crm)))
    turns = Turns(TurnRunner(build_graph(svc, checkpointer=await open_checkpointer(db)), svc))
    await _store(db, settings).set(ctx.owner_id, "crm", "api_token", SECRET)
    model.push(call("crm__whoami", {}), say("You are you."))
    out = await turns.send(ctx, ctx.owner_id + "/crm", "who am I in the crm")
    assert out.outcome == "read" and seen == [SECRET]
    assert all(SECRET not in str(e) for e in out.events)  # nothing the turn emits carries it
    async with all_rows(db) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM audit_log WHERE owner_id = %s AND detail::text LIKE %s",
                                 (ctx.owner_id, f"%{SECRET}%"))
        row = await cur.fetchone()
    assert row is not None and row["n"] == 0


def test_the_cli_stores_a_secret_from_stdin_and_lists_names_only(settings: Settings, owner: str, tmp_path: Path) -> None:
    env = child_environment(settings)
    stored = subprocess.run([_TOLLGATE, "credentials", "set", "api_token", "--owner", owner, "--tool", "crm"],
                            input=SECRET + "\n", env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert stored.returncode == 0, stored.stderr[-2000:]
    assert SECRET not in stored.stdout + stored.stderr
    listed = subprocess.run([_TOLLGATE, "credentials", "list", "--owner", owner], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and listed.stdout.split() == ["crm/api_token"] and SECRET not in listed.stdout
    bad = subprocess.run([_TOLLGATE, "credentials", "set", "bad name", "--owner", owner, "--tool", "crm"],
                         input="x\n", env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "not stored" in bad.stderr
