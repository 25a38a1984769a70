"""The audit log: append-only for everyone, hash-chained, free of raw values; refused checkpoints land in it.

Tampering is demonstrated inside transactions that are rolled back, so the session's shared
audit log stays intact for every other test.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import ormsgpack
import psycopg
import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from psycopg import AsyncConnection
from stdnum import luhn

from tollgate.graph.ledger.audit import AuditLeak, AuditRecord, append_audit, verify_chain
from tollgate.graph.state import Context
from tollgate.graph.store.checkpoint_guard import CheckpointRefused, PermissiveSerializer, StrictSerializer
from tollgate.graph.store.checkpointer import open_checkpointer
from tollgate.graph.store.db import Database
from tests.fakes import ScriptedModel, call, say
from tests.harness import Turns

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def _record(owner: str, **changes: Any) -> AuditRecord:
    base: dict[str, Any] = {
        "owner_id": owner, "stage": "gate", "decision": "refuse", "reason": "operator_only",
        "code": "permission_denied", "tool": "calendar", "action": "purge", "args_hash": "ab" * 32,
        "thread_id": owner + "/t", "turn_id": "turn_1", "detail": {"tier": "mustlist"},
    }
    return AuditRecord(**(base | changes))


async def test_append_derives_columns_from_the_chained_body(db: Database, owner: str) -> None:
    seq = await append_audit(db.pool, _record(owner, detail={"dlp": ["aws_access_key_id"], "shadow": True}), now=NOW)
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT * FROM audit_log WHERE seq = %s", (seq,))
        row = await cur.fetchone()
    assert row is not None
    assert (row["owner_id"], row["stage"], row["decision"], row["reason"], row["tool"], row["action"]) == (
        owner, "gate", "refuse", "operator_only", "calendar", "purge",
    )
    assert row["detail"] == {"dlp": ["aws_access_key_id"], "shadow": True}
    assert row["created_at"] == NOW
    assert json.loads(row["body"])["v"] == 1
    async with db.pool.connection() as conn:
        verdict = await verify_chain(conn)
    assert verdict.ok and verdict.rows >= 1


async def test_concurrent_appends_keep_one_chain(db: Database, owner: str) -> None:
    seqs = await asyncio.gather(*(append_audit(db.pool, _record(owner, turn_id=f"turn_{i}"), now=NOW) for i in range(20)))
    assert len(set(seqs)) == 20
    async with db.pool.connection() as conn:
        assert (await verify_chain(conn)).ok


async def _refused(conn: AsyncConnection[Any], sql: str, params: tuple[Any, ...] = ()) -> type[Exception]:
    try:
        async with conn.transaction():
            await conn.execute(sql, params)
    except psycopg.Error as exc:
        return type(exc)
    raise AssertionError(f"statement was not refused: {sql}")


@pytest.mark.parametrize(
    "sql",
    [
        pytest.param("UPDATE audit_log SET reason = 'nothing_to_see' WHERE owner_id = %s", id="update"),
        pytest.param("DELETE FROM audit_log WHERE owner_id = %s", id="delete"),
        pytest.param("TRUNCATE audit_log", id="truncate"),
    ],
)
async def test_even_the_superuser_cannot_change_the_log(admin_db: Database, owner: str, sql: str) -> None:
    await append_audit(admin_db.pool, _record(owner), now=NOW)
    async with admin_db.pool.connection() as conn:
        error = await _refused(conn, sql, (owner,) if "%s" in sql else ())
    assert issubclass(error, psycopg.errors.InsufficientPrivilege)


async def _as_app_role(conn: AsyncConnection[Any], action: Callable[[], Awaitable[Any]]) -> Any:
    async with conn.transaction():
        await conn.execute("SET LOCAL ROLE tollgate_app")
        return await action()


async def test_the_application_role_may_append_and_read_but_never_change(db: Database, owner: str) -> None:
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = 'tollgate_app'"
        )
        role = await cur.fetchone()
        assert role is not None, "migration 0003 creates the tollgate_app role"
        assert role["rolsuper"] is False and role["rolbypassrls"] is False

        async def append() -> int:
            return await append_audit(conn, _record(owner, stage="execute"), now=NOW)

        seq = await _as_app_role(conn, append)
        assert seq > 0

        async def read() -> Any:
            cur = await conn.execute("SELECT count(*) AS n FROM audit_log WHERE owner_id = %s", (owner,))
            return await cur.fetchone()

        assert (await _as_app_role(conn, read))["n"] >= 1

        # The app role may still use the ordinary tables.
        async def touch() -> Any:
            return await conn.execute("UPDATE threads SET updated_at = now() WHERE thread_id = %s", (owner,))

        await _as_app_role(conn, touch)

        for sql in (
            "UPDATE audit_log SET reason = 'x' WHERE owner_id = %s",
            "DELETE FROM audit_log WHERE owner_id = %s",
            "TRUNCATE audit_log",
            "ALTER TABLE audit_log DISABLE TRIGGER audit_log_no_change",
            "DROP TRIGGER audit_log_no_change ON audit_log",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                async with conn.transaction():
                    await conn.execute("SET LOCAL ROLE tollgate_app")
                    await conn.execute(sql, (owner,) if "%s" in sql else ())


async def test_the_trigger_owns_the_chain_fields(db: Database, owner: str) -> None:
    """A client cannot choose its own sequence number or hashes: the trigger overwrites them."""
    body = _record(owner).body(NOW)
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "INSERT INTO audit_log (seq, body, prev_hash, row_hash, owner_id) VALUES (1, %s, %s, %s, 'forged') "
            "RETURNING seq, prev_hash, owner_id",
            (body, "f" * 64, "f" * 64),
        )
        row = await cur.fetchone()
        assert row is not None and row["seq"] != 1 and row["prev_hash"] != "f" * 64 and row["owner_id"] == owner
        assert (await verify_chain(conn)).ok


class _Rollback(Exception):
    pass


@pytest.mark.parametrize(
    ("tamper", "problem"),
    [
        pytest.param("UPDATE audit_log SET body = replace(body, 'operator_only', 'mapped') WHERE seq = %(seq)s", "row_hash", id="edit-body"),
        pytest.param("UPDATE audit_log SET reason = 'mapped' WHERE seq = %(seq)s", "column:reason", id="edit-column"),
        pytest.param("UPDATE audit_log SET owner_id = 'someone_else' WHERE seq = %(seq)s", "column:owner_id", id="edit-owner"),
        pytest.param("UPDATE audit_log SET created_at = created_at - interval '1 day' WHERE seq = %(seq)s", "column:created_at", id="edit-time"),
        pytest.param("DELETE FROM audit_log WHERE seq = %(seq)s", "gap", id="delete-row"),
        pytest.param(
            "UPDATE audit_log SET reason = 'mapped', body = replace(body, 'operator_only', 'mapped'), "
            "row_hash = encode(sha256(convert_to(prev_hash || replace(body, 'operator_only', 'mapped'), 'UTF8')), 'hex') "
            "WHERE seq = %(seq)s",
            "prev_hash",
            id="edit-and-rehash-one-row",
        ),
    ],
)
async def test_tampering_breaks_the_chain(admin_db: Database, owner: str, tamper: str, problem: str) -> None:
    seq = await append_audit(admin_db.pool, _record(owner), now=NOW)
    await append_audit(admin_db.pool, _record(owner, turn_id="turn_after"), now=NOW)
    async with admin_db.pool.connection() as conn:
        with pytest.raises(_Rollback):
            async with conn.transaction():
                # Only a superuser switching triggers off can even try this.
                await conn.execute("SET LOCAL session_replication_role = replica")
                await conn.execute(tamper, {"seq": seq})
                verdict = await verify_chain(conn)
                assert not verdict.ok
                assert verdict.problem == problem
                assert verdict.first_bad_seq in (seq, seq + 1)
                raise _Rollback
        assert (await verify_chain(conn)).ok


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"reason": "AKIA" + "IOSFODNN7EXAMPLE"}, id="secret-in-reason"),
        pytest.param({"detail": {"note": "sk_" + "live_4eC39HqLyjWDarjtT1zdp7dc"}}, id="secret-in-detail"),
    ],
)
async def test_a_record_carrying_a_secret_is_refused(db: Database, owner: str, changes: dict[str, Any]) -> None:
    with pytest.raises(AuditLeak) as caught:
        await append_audit(db.pool, _record(owner, **changes), now=NOW)
    assert "IOSFODNN7EXAMPLE" not in str(caught.value) and "4eC39" not in str(caught.value)
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM audit_log WHERE owner_id = %s", (owner,))
        row = await cur.fetchone()
    assert row is not None and row["n"] == 0


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"detail": {"args": {"to": "x"}}}, id="nested-values"),
        pytest.param({"reason": "x" * 500}, id="long-text"),
    ],
)
def test_records_hold_codes_not_values(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        _record("o_x", **changes).body(NOW)


# --- checkpoint blobs that try to import or call code -----------------------------------------

def _ext(code: int, payload: tuple[Any, ...]) -> bytes:
    return ormsgpack.packb(ormsgpack.Ext(code, ormsgpack.packb(payload)))


def _evil_blobs(marker: str) -> dict[str, tuple[str, bytes]]:
    shell = f"touch {marker}"
    return {
        "constructor-single-arg": ("msgpack", _ext(0, ("os", "system", shell))),
        "constructor-pos-args": ("msgpack", _ext(1, ("os", "system", [shell]))),
        "constructor-kw-args": ("msgpack", _ext(2, ("subprocess", "run", {"args": ["touch", marker]}))),
        "method-call": ("msgpack", _ext(3, ("builtins", "__import__", "os", "system"))),
        "pydantic-v2": ("msgpack", _ext(5, ("subprocess", "Popen", {"args": ["touch", marker]}, None))),
        "nested-in-a-dict": ("msgpack", ormsgpack.packb({"ok": 1, "x": ormsgpack.Ext(1, ormsgpack.packb(("os", "system", [shell])))})),
        "json-constructor": ("json", json.dumps({"lc": 2, "type": "constructor", "id": ["os", "system"], "args": [shell]}).encode()),
        "pickle": ("pickle", pickle.dumps(Exception("pickled"))),
    }


@pytest.mark.parametrize("name", list(_evil_blobs("x")))
def test_the_serializer_refuses_blobs_that_import_or_call_code(name: str, tmp_path: Any) -> None:
    marker = tmp_path / "pwned"
    with pytest.raises(CheckpointRefused) as caught:
        StrictSerializer().loads_typed(_evil_blobs(str(marker))[name])
    assert caught.value.blocked and caught.value.code == "permission_denied"
    assert not marker.exists()


def test_safe_state_still_round_trips() -> None:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    serde = StrictSerializer()
    value = {"messages": [HumanMessage("hi"), AIMessage("yo"), ToolMessage("r", tool_call_id="c1")], "n": 3, "when": NOW}
    assert serde.loads_typed(serde.dumps_typed(value)) == value


class _Lax(StrictSerializer):
    """A "strict" serializer that loads whatever LangGraph would: start-up must notice by trying it."""

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return JsonPlusSerializer.loads_typed(self, data)


@pytest.mark.parametrize(
    ("serde", "problem"),
    [
        pytest.param(JsonPlusSerializer(), "StrictSerializer", id="plain-jsonplus"),
        pytest.param("lax", "outside the safe list loads", id="loads-blocked-types"),
    ],
)
async def test_startup_refuses_a_permissive_serializer(db: Database, serde: Any, problem: str) -> None:
    if isinstance(serde, str):
        serde = _Lax()
    with pytest.raises(PermissiveSerializer, match=problem):
        await open_checkpointer(db, serde=serde, setup=False)


async def test_a_tampered_checkpoint_is_refused_and_audited(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database, tmp_path: Any
) -> None:
    thread = ctx.owner_id + "/tampered"
    model.push(call("calendar__list", {"range": "today"}), say(""))
    await turns.send(ctx, thread, "calendar today")
    marker = tmp_path / "pwned"
    type_, blob = _evil_blobs(str(marker))["constructor-pos-args"]
    async with db.pool.connection() as conn:
        cur = await conn.execute(
            "UPDATE checkpoint_blobs SET type = %s, blob = %s WHERE thread_id = %s AND channel = 'recent'",
            (type_, blob, thread),
        )
        assert cur.rowcount >= 1
    with pytest.raises(CheckpointRefused):
        await turns.runner.send(ctx, thread, "calendar again")
    assert not marker.exists()
    rows = [r for r in await _audit_rows(db, ctx.owner_id) if r["stage"] == "serde"]
    assert [(r["decision"], r["reason"], r["code"], r["detail"]["blocked"]) for r in rows] == [
        ("refuse", "blocked_type", "permission_denied", ["os.system"])
    ]


def _uuid_with_card_digits() -> str:
    """A UUID-shaped thread id whose first three groups are a Luhn-valid Visa number (about one
    random UUID in 10,000 is)."""
    body = "4" + "".join(secrets.choice("0123456789") for _ in range(14))
    digits = body + luhn.calc_check_digit(body)
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:]}-{secrets.token_hex(2)}-{secrets.token_hex(6)}"


async def test_a_thread_id_whose_digits_read_like_a_card_number_still_runs_its_turns(
    turns: Turns, model: ScriptedModel, ctx: Context, db: Database
) -> None:
    # Found under load: such a thread's audit record was refused as carrying a card number
    # (AuditLeak), and the turn failed.
    thread = _uuid_with_card_digits()
    model.push(call("calendar__list", {"range": "today"}), say(""))
    out = await turns.send(ctx, thread, "calendar today")
    assert out.outcome == "read"
    assert [r["decision"] for r in await _audit_rows(db, ctx.owner_id) if r["thread_id"] == thread]


async def _audit_rows(db: Database, owner: str) -> list[dict[str, Any]]:
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT * FROM audit_log WHERE owner_id = %s ORDER BY seq", (owner,))
        return list(await cur.fetchall())


async def _records_of(db: Database, owner: str, turn_id: str) -> int:
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM audit_log WHERE owner_id = %s AND turn_id = %s", (owner, turn_id))
        row = await cur.fetchone()
    return int(row["n"]) if row else 0


def test_the_args_hash_field_takes_only_a_sha256_digest(owner: str) -> None:
    """The one field the DLP last guard skips (it is made here) is held to its exact format instead."""
    _record(owner).body(NOW)
    _record(owner, args_hash="").body(NOW)
    for bad in ("AKIA" + "A" * 60, "ab" * 31, "AB" * 32, "ab" * 32 + "\n"):
        with pytest.raises(ValueError, match="SHA-256"):
            _record(owner, args_hash=bad).body(NOW)


