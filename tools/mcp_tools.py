"""MCP servers as governed tools, over stdio or streamable HTTP, with the official ``mcp`` SDK.

A server may be ``per_owner``: each owner's calls then go through a session of their own that
carries their credential (``per_owner = { credential = "api_token" }`` sends
``Authorization: Bearer <the owner's api_token>``, stored with ``tollgate credentials set``);
the tool list is read once, without one.

Why the SDK itself rather than ``langchain-mcp-adapters``: governance needs the session: the
server's own tool list and schemas, and its list-changed events, to re-check them against the
policy at run time. The adapters hide both behind LangChain tools.

A policy file (TOML) names, per server, how to reach it and, per tool, everything the server
cannot be trusted to say: tier, effect (required: a tool is never taken for a read by default),
id fields and kinds, which result field carries an id of which kind, the preview template, and
how long a call may take (``timeout_seconds``, per server and per tool, 30 s by default)::

    [servers.notes]
    command = ["python", "-m", "notes_server"]      # or: url = "http://127.0.0.1:9000/mcp"
    timeout_seconds = 20                             # optional: each call's limit (default 30)

    [servers.notes.tools.list_notes]
    tier = "allowlist"
    effect = "read"
    result_ids = { kind = "note", field = "id" }     # rows of the structured result's list

    [servers.notes.tools.add_note]
    tier = "confirmation"
    effect = "write"
    preview = "Add the note '{text}'"
    schema_sha256 = "…"                              # optional: the only schema accepted

    [servers.notes.tools.share_note]
    tier = "confirmation"
    effect = "write"
    preview = "Share '{id}' to {destination}"
    id_fields = { id = "note" }
    url_args = ["destination"]                       # checked by the egress gate

Fail closed: a tool the server offers that the policy does not name is never offered to the
model (and is refused if called: it is in no registry); a schema Tollgate cannot express as a
closed model refuses the tool at start-up; a tool whose schema changes at run time (announced
by the server's list-changed event, and re-read before every write) is refused from then on,
until the policy file pins the new schema's hash (``schema_sha256``; the file is read again on
each check). Once accepted, the tool is offered and checked with its new schema in every registry
that serves it (:meth:`McpTools.serve_in`), without a restart.
Arguments named in ``url_args`` are addresses the server will connect to: they pass the egress
gate first. DLP scans every string argument of every call, named or not.

A call that takes longer than its ``timeout_seconds`` is abandoned: a read fails (``unavailable``),
and a write ends with its outcome unknown (it may have run; it is never run again). A server's
descriptions of its tools and their arguments are someone else's text: they are offered to the
model fenced as DATA, and one that reads as instructions to an assistant is withheld (a neutral
description is offered) and the cards of that tool say so.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
import json
import logging
import tomllib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Generic, Literal, TypeVar

import anyio
import httpx2  # the HTTP client the mcp SDK's streamable HTTP transport takes (its own dependency)
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel, Field, StringConstraints, create_model

from tollgate.policies.arguments import ArgsModel, SafeText
from tollgate.policies.egress import EgressUrl, UrlField
from tollgate.policies.errors import OutcomeUnknown, PermissionDenied, Unavailable
from tollgate.policies.fencing import fence, new_nonce
from tollgate.policies.provenance import reads_as_instructions
from tollgate.policies.tiers import Effect, Tier
from tollgate.tools.loading import ToolLoadError
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, IdKind, Registry, ResultRow, ToolSpec, template_preview

__all__ = ["SERVER_KEYS", "TOOL_KEYS", "McpCredentialMissing", "McpPolicyError", "McpToolChanged", "McpTools",
           "load_policy", "open_mcp_tools", "schema_hash", "server_target"]

_log = logging.getLogger("tollgate.mcp")
_TIERS: Final = ("allowlist", "confirmation", "mustlist", "blocklist")
_EFFECTS: Final = ("read", "write", "destructive")
_TEXT_CAP: Final = 20_000
_TIMEOUT_SECONDS: Final = 30.0
SERVER_KEYS: Final = frozenset({"command", "url", "env", "id_kinds", "tools", "per_owner", "timeout_seconds"})
"""The keys a server's table of the policy may have."""
TOOL_KEYS: Final = frozenset({"tier", "effect", "preview", "id_fields", "result_ids", "schema_sha256", "usage_examples",
                              "url_args", "trust", "timeout_seconds"})
"""The keys a tool's table of the policy may have."""
"""A call's time limit when the policy sets none."""
_OWNER_SESSIONS: Final = 64  # per-owner sessions kept open per server (the least recently used close first)
T = TypeVar("T")


class McpPolicyError(ToolLoadError):
    """The MCP policy file is unusable, or a server's tool cannot be governed as it declares."""


class McpToolChanged(PermissionDenied):
    """The server changed this tool's schema (or dropped it) after start-up; refused until accepted."""

    def __init__(self, function: str) -> None:
        super().__init__(function, "the MCP server changed this tool after start-up")
        self.message = (f"{function} changed on its server since Tollgate started, so it is refused until an "
                        "operator accepts the new version")


class McpCredentialMissing(PermissionDenied):
    """A per-owner MCP server's call for an owner who has not stored the credential it needs."""

    def __init__(self, function: str, credential: str, tool: str) -> None:
        super().__init__(function, "no credential for this owner")
        self.message = (f"{function} needs your {credential!r} for {tool}, and none is stored "
                        f"(tollgate credentials set {credential} --tool {tool})")


class McpCallTimedOut(Unavailable):
    """An MCP read that took longer than its time limit (a write that does ends as ``OutcomeUnknown``)."""

    def __init__(self, function: str, seconds: float) -> None:
        super().__init__(f"the MCP tool {function}")
        self.message = f"{function} did not answer within {seconds:g} s"


class McpCallFailed(Unavailable):
    """The MCP server answered the call with an error result."""

    def __init__(self, function: str) -> None:
        super().__init__(f"the MCP tool {function}")
        self.message = f"{function} reported an error, so it may not have run"


def schema_hash(schema: Mapping[str, Any]) -> str:
    """SHA-256 of a tool's input schema in canonical JSON (what ``schema_sha256`` pins)."""
    return hashlib.sha256(json.dumps(schema, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# --- JSON Schema to a closed pydantic model ---------------------------------------------------


def _field_type(schema: Mapping[str, Any], where: str) -> Any:
    """The pydantic type of one property (a bounded subset of JSON Schema; anything else refused)."""
    kind = schema.get("type")
    nullable = False
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        nullable = len(kinds) != len(kind)
        if len(kinds) != 1:
            raise McpPolicyError(f"{where}: a property of several types cannot be governed")
        kind = kinds[0]
    if "enum" in schema and all(isinstance(v, str) for v in schema["enum"]):
        out: Any = Literal[tuple(schema["enum"])]  # type: ignore[valid-type]
    elif kind == "string":
        out = SafeText(int(schema.get("maxLength", 10_000)), min_length=int(schema.get("minLength", 0)))
        if "pattern" in schema:
            out = Annotated[out, StringConstraints(pattern=schema["pattern"])]
    elif kind == "integer":
        out = Annotated[int, Field(ge=schema.get("minimum"), le=schema.get("maximum"))]
    elif kind == "number":
        out = Annotated[float, Field(ge=schema.get("minimum"), le=schema.get("maximum"), allow_inf_nan=False)]
    elif kind == "boolean":
        out = bool
    elif kind == "array" and isinstance(schema.get("items"), Mapping):
        out = Annotated[list[_field_type(schema["items"], where + "[]")],  # type: ignore[misc]
                        Field(min_length=schema.get("minItems"), max_length=int(schema.get("maxItems", 100)))]
    elif kind == "object":
        out = _model(schema, where)
    else:
        raise McpPolicyError(f"{where}: JSON Schema {json.dumps(schema)[:120]} cannot be governed")
    return out | None if nullable else out


def _model(schema: Mapping[str, Any], where: str, *, url_args: tuple[str, ...] = ()) -> type[ArgsModel]:
    """A closed, frozen, strict model of an object schema (the arguments, or an object inside them).

    ``url_args`` name the string arguments that are addresses the server will connect to: they
    pass the egress gate (:class:`~policies.egress.UrlField`) before the call runs.
    """
    missing = set(url_args) - set(schema.get("properties") or {})
    if missing:
        raise McpPolicyError(f"{where}: url_args names no such argument: {', '.join(sorted(missing))}")
    if schema.get("type", "object") != "object":
        raise McpPolicyError(f"{where}: the arguments must be an object")
    required = set(schema.get("required", ()))
    fields: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        if not isinstance(prop, Mapping) or not name.isidentifier():
            raise McpPolicyError(f"{where}.{name}: cannot be governed")
        typ = Annotated[EgressUrl, UrlField()] if name in url_args else _field_type(prop, f"{where}.{name}")
        description = _offered(str(prop.get("description", ""))[:300]) or None
        if name in required:
            fields[name] = (typ, Field(description=description))
        else:
            fields[name] = (typ | None, Field(default=prop.get("default"), description=description))
    return create_model(f"{where.replace('.', '_')}_args", __base__=ArgsModel, **fields)  # type: ignore[call-overload,no-any-return]


_NONCE: Final = new_nonce()
"""The fence of the servers' argument descriptions in the schemas offered to the model."""


def _offered(description: str) -> str:
    """A server's description of an argument as the model may see it: fenced as DATA (it is the
    server's words), or withheld when it reads as instructions."""
    if not description or reads_as_instructions(description):
        return ""
    return fence("argument_description", description, _NONCE)


# --- the policy --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ToolPolicy:
    tier: Tier
    effect: Effect
    preview: str | None
    id_fields: dict[str, str]
    result_ids: dict[str, str] | None
    schema_sha256: str | None
    usage_examples: tuple[str, ...]
    url_args: tuple[str, ...]
    trust: Literal["owner", "third_party"] = "third_party"
    timeout_seconds: float = _TIMEOUT_SECONDS


@dataclass(frozen=True, slots=True)
class _OwnerAuth:
    credential: str
    header: str
    prefix: str


@dataclass(frozen=True, slots=True)
class _ServerPolicy:
    name: str
    command: tuple[str, ...] | None
    url: str | None
    env: dict[str, str]
    id_kinds: tuple[IdKind, ...]
    tools: dict[str, _ToolPolicy]
    per_owner: _OwnerAuth | None = None


def load_policy(path: Path) -> list[_ServerPolicy]:
    """The policy's servers; :class:`McpPolicyError` for the first thing it cannot use."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise McpPolicyError(f"MCP policy {path}: {exc}") from None
    servers: list[_ServerPolicy] = []
    for name, raw in (data.get("servers") or {}).items():
        if not name.isidentifier():
            raise McpPolicyError(f"MCP policy: server name {name!r} must be an identifier")
        command, url = raw.get("command"), raw.get("url")
        if (command is None) == (url is None):
            raise McpPolicyError(f"MCP policy: server {name!r} needs exactly one of command or url")
        tools: dict[str, _ToolPolicy] = {}
        for tool_name, spec in (raw.get("tools") or {}).items():
            tier, effect = spec.get("tier"), spec.get("effect")
            if tier not in _TIERS or effect not in _EFFECTS:
                raise McpPolicyError(f"MCP policy: {name}.{tool_name} needs a tier of {_TIERS} and an effect of "
                                     f"{_EFFECTS} (the effect is never assumed)")
            timeout = spec.get("timeout_seconds", raw.get("timeout_seconds", _TIMEOUT_SECONDS))
            if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 3600:
                raise McpPolicyError(f"MCP policy: {name}.{tool_name}: timeout_seconds must be a number of seconds "
                                     "between 0 and 3600")
            trust = spec.get("trust", "third_party")
            if trust not in ("owner", "third_party"):
                raise McpPolicyError(f"MCP policy: {name}.{tool_name}: trust must be 'owner' or 'third_party', not {trust!r}")
            if tier == "confirmation" and not spec.get("preview"):
                raise McpPolicyError(f"MCP policy: {name}.{tool_name} is a confirmation and needs a preview template")
            tools[tool_name] = _ToolPolicy(
                tier=tier, effect=effect, preview=spec.get("preview"), id_fields=dict(spec.get("id_fields") or {}),
                result_ids=dict(spec["result_ids"]) if "result_ids" in spec else None,
                schema_sha256=spec.get("schema_sha256"), usage_examples=tuple(spec.get("usage_examples") or ()),
                url_args=tuple(spec.get("url_args") or ()), trust=trust, timeout_seconds=float(timeout),
            )
        kinds = tuple(IdKind(k, **v) for k, v in (raw.get("id_kinds") or {}).items())
        auth = raw.get("per_owner")
        if auth is not None and (url is None or not isinstance(auth.get("credential"), str)):
            raise McpPolicyError(f"MCP policy: server {name!r}: per_owner needs a url and the credential's name")
        owner_auth = _OwnerAuth(auth["credential"], auth.get("header", "Authorization"),
                                auth.get("prefix", "Bearer ")) if auth is not None else None
        servers.append(_ServerPolicy(name, tuple(command) if command else None, url, dict(raw.get("env") or {}),
                                     kinds, tools, owner_auth))
    return servers


# --- the live connection -----------------------------------------------------------------------


@dataclass
class _Live:
    """One connected server: its session and the schema hashes accepted at start-up."""

    policy: _ServerPolicy
    client: Client
    accepted: dict[str, str]
    policy_path: Path
    changed: set[str] = field(default_factory=set)
    owners: OrderedDict[tuple[str, str], _Held[Client]] = field(default_factory=OrderedDict)
    registries: list[Registry] = field(default_factory=list)
    """The registries that serve this server's tools (a newly accepted schema replaces the old there)."""

    async def session_for(self, ctx: ExecContext, function: str) -> Client:
        """The session a call for ``ctx``'s owner uses: the shared one, or (``per_owner``) one that
        carries that owner's credential, opened on first use and kept for the next calls."""
        auth = self.policy.per_owner
        if auth is None:
            return self.client
        secret = await ctx.credentials.get(auth.credential) if ctx.credentials is not None else None
        if not secret:
            raise McpCredentialMissing(function, auth.credential, self.policy.name)
        key = (ctx.owner_id, hashlib.sha256(secret.encode()).hexdigest())  # a new secret gets a new session
        held = self.owners.get(key)
        if held is None:
            url = str(self.policy.url)
            headers = {auth.header: auth.prefix + secret}
            held = _Held(lambda: _owner_session(url, headers), f"mcp-session:{self.policy.name}")
            self.owners[key] = held
            while len(self.owners) > _OWNER_SESSIONS:
                await self.owners.popitem(last=False)[1].stop()
        self.owners.move_to_end(key)
        return await held.value()

    async def close_owner_sessions(self) -> None:
        """Leave every owner's session."""
        while self.owners:
            await self.owners.popitem()[1].stop()

    async def recheck(self) -> None:
        """Re-list the server's tools: an accepted tool whose schema changed or vanished is refused from now
        on, until the policy file pins its new schema's hash (read again here, so no restart is needed)."""
        listed = await self.client.list_tools(cache_mode="refresh")
        tools = {t.name: t for t in listed.tools}
        now = {name: schema_hash(t.input_schema) for name, t in tools.items()}
        pins = _pins(self.policy_path, self.policy.name)
        for name, digest in self.accepted.items():
            current = now.get(name)
            if current == digest:
                continue
            if current is not None and pins.get(name) == current and self._serve(tools[name]):
                self.accepted[name] = current
                self.changed.discard(name)
                _log.warning("MCP server %s: the policy accepts the new schema of %s", self.policy.name, name)
            elif name not in self.changed:
                self.changed.add(name)
                # The new hash is what an operator pins to accept it.
                _log.warning("MCP server %s changed its tool %s (schema_sha256 now %s): refused until the policy "
                             "pins it", self.policy.name, name, current)

    def _serve(self, tool: Any) -> bool:
        """Offer ``tool`` with its new schema in every registry that serves it; ``False`` (it stays
        refused) when the new schema cannot be governed."""
        try:
            spec = _action(self, tool, self.policy.tools[tool.name])
        except McpPolicyError as exc:
            _log.warning("MCP server %s: the new schema of %s cannot be governed (%s); still refused",
                         self.policy.name, tool.name, exc)
            return False
        for registry in self.registries:
            registry.replace_action(self.policy.name, spec)
        return True

    async def call(self, ctx: ExecContext, function: str, name: str, args: dict[str, Any], *, writes: bool,
                   timeout: float) -> Any:
        if writes:
            # A write does not rely on the change event having arrived: the list is read first.
            await self.recheck()
        if name in self.changed:
            raise McpToolChanged(function)
        session = await self.session_for(ctx, function)
        try:
            async with asyncio.timeout(timeout):
                result = await session.call_tool(name, args)
        except TimeoutError:
            _log.warning("MCP server %s: %s took longer than %g s; abandoned", self.policy.name, name, timeout)
            raise OutcomeUnknown(function) if writes else McpCallTimedOut(function, timeout) from None
        if result.is_error:
            raise McpCallFailed(function)
        if result.structured_content is not None:
            content = result.structured_content
            # The SDK wraps a plain return value as {"result": value}.
            return content["result"] if isinstance(content, dict) and set(content) == {"result"} else content
        texts = [getattr(block, "text", "") for block in result.content]
        text = "\n".join(t for t in texts if t)
        if len(text) > _TEXT_CAP:  # said in the text, so the model and the card know the rest is missing
            text = text[:_TEXT_CAP] + f"… [cut here: {len(text) - _TEXT_CAP:,} more characters not kept]"
        return text


@asynccontextmanager
async def _owner_session(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    """A session carrying one owner's headers (its HTTP client is ours to close; no response cache is shared)."""
    # The SDK's own defaults: a server may hold a response stream open for minutes.
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http, Client(
        streamable_http_client(url, http_client=http), cache=None
    ) as client:
        yield client


def _pins(path: Path, server: str) -> dict[str, str]:
    """The schema hashes the policy file pins for ``server``'s tools now (none if it cannot be read)."""
    try:
        servers = {s.name: s for s in load_policy(path)}
    except McpPolicyError:
        return {}
    found = servers.get(server)
    return {name: t.schema_sha256 for name, t in found.tools.items() if t.schema_sha256} if found else {}


def _action(live: _Live, tool: Any, policy: _ToolPolicy) -> ActionSpec:
    server = live.policy.name
    function = f"{server}.{tool.name}"
    args_model = _model(tool.input_schema, f"{server}.{tool.name}", url_args=policy.url_args)

    async def run(ctx: ExecContext, args: BaseModel) -> ActionResult:
        output = await live.call(ctx, function, tool.name, args.model_dump(mode="json", exclude_none=True),
                                 writes=policy.effect != "read", timeout=policy.timeout_seconds)
        result = ActionResult(tool=server, action=tool.name, kind="write" if policy.effect != "read" else "item",
                              summary=output if isinstance(output, str) and len(output) < 300
                              else f"{function} returned a result.", content=output)
        if policy.effect != "read":
            result["changed"] = 1
        rows = _rows(output, policy.result_ids)
        if rows is not None and policy.result_ids is not None:
            result.update(kind="list", rows=rows, list_kind=policy.result_ids["kind"])  # type: ignore[typeddict-item]
        return result

    said = (tool.description or tool.name).strip().splitlines()[0][:300]
    withheld = reads_as_instructions(tool.description or "")
    if withheld:
        _log.warning("MCP server %s: the description of %s reads as instructions to an assistant; withheld",
                     server, tool.name)
    return ActionSpec(
        name=tool.name, description=f"{tool.name.replace('_', ' ')} ({server})" if withheld else said, args=args_model,
        tier=policy.tier, effect=policy.effect, executor=run, renderer=_render, id_fields=policy.id_fields,
        preview=template_preview(policy.preview) if policy.preview else None, idempotent=policy.effect == "read",
        usage_examples=policy.usage_examples,
        # An MCP server's results are someone else's content unless the policy vouches for them.
        third_party=policy.trust == "third_party", source_label=f"MCP server {server}, tool {tool.name}",
        described_by=f"MCP server {server}, tool {tool.name}", description_withheld=withheld,
    )


def _rows(output: Any, result_ids: Mapping[str, str] | None) -> list[ResultRow] | None:
    """The id-bearing rows of a structured result (``{"result": [...]}`` or a list), per the policy."""
    if result_ids is None:
        return None
    items = output
    if not isinstance(items, list):
        return None
    key = result_ids.get("field", "id")
    label = result_ids.get("label")
    rows: list[ResultRow] = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get(key), (str, int)):
            text = str(item.get(label, "")) if label else json.dumps(item, ensure_ascii=False)[:200]
            rows.append({"id": str(item[key]), "label": text[:200]})
    return rows


def _render(result: ActionResult) -> str:
    rows = result.get("rows")
    if rows:
        return result["summary"] + "\n" + "\n".join(f"{i}. {r['label']}" for i, r in enumerate(rows, 1))
    return result["summary"]


async def _watch(live: _Live) -> None:
    """Re-check the tool list on each list-changed event the server sends (2026-07-28 listen streams).

    A server without listen streams announces changes through the message handler instead; a
    stream that fails is logged (writes still re-read the list before they run).
    """
    try:
        async with live.client.listen(tools_list_changed=True) as subscription:
            async for _ in subscription:
                await live.recheck()
    except Exception as exc:
        _log.info("MCP server %s: no tool-change stream (%s)", live.policy.name, type(exc).__name__)


class _Held(Generic[T]):
    """An async context entered and left by a task of its own, so any task may start or stop it.

    The SDK's sessions run anyio task groups, which must be left by the task that entered them;
    a turn, a request and a test fixture each run in tasks of their own.
    """

    def __init__(self, enter: Callable[[], AbstractAsyncContextManager[T]], name: str) -> None:
        self._enter = enter
        self._ready: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._hold(), name=name)

    async def _hold(self) -> None:
        try:
            async with self._enter() as value:
                self._ready.set_result(value)
                await self._stop.wait()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(_reason(exc))
            if not isinstance(exc, Exception):
                raise

    async def value(self) -> T:
        """What the context yielded; raises what entering it raised."""
        try:
            return await asyncio.shield(self._ready)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Leave the context (and wait until it is left)."""
        self._stop.set()
        await asyncio.gather(asyncio.shield(self._task), return_exceptions=True)


class McpTools(list[ToolSpec]):
    """The governed tools of the policy's servers, one per server (a list of tool specs)."""

    def __init__(self, specs: list[ToolSpec] = (), lives: list[_Live] = ()) -> None:  # type: ignore[assignment]
        super().__init__(specs)
        self._lives = list(lives)

    def serve_in(self, registry: Registry) -> None:
        """Keep ``registry``'s copies of these tools current: a schema the policy accepts at run time
        replaces the one read at start-up there."""
        for live in self._lives:
            live.registries.append(registry)


@asynccontextmanager
async def open_mcp_tools(policy_path: Path) -> AsyncIterator[McpTools]:
    """Connect to every server of the policy and yield one governed tool per server, for the block.

    The sessions live in a task of their own (:class:`_Held`), so the block may be entered and
    left by different tasks. Raises :class:`McpPolicyError` for an unusable policy, an
    unreachable server, a pinned schema that does not match, or a schema that cannot be governed.
    """
    held = _Held(lambda: _connected(policy_path), "mcp-sessions")
    tools = await held.value()
    try:
        yield tools
    finally:
        await held.stop()


def _reason(exc: BaseException) -> Exception:
    """The policy error inside ``exc`` (the SDK's task groups wrap it in exception groups), else ``exc``."""
    if isinstance(exc, McpPolicyError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _reason(inner)
            if isinstance(found, McpPolicyError):
                return found
    return exc if isinstance(exc, Exception) else McpPolicyError("MCP start-up was cancelled")


def server_target(server: _ServerPolicy) -> Any:
    """What the SDK's ``Client`` connects to for ``server``: its URL, or its command over stdio."""
    if server.url is not None:
        return server.url
    assert server.command is not None
    return StdioServerParameters(command=server.command[0], args=list(server.command[1:]), env={**server.env} or None)


@asynccontextmanager
async def _connected(policy_path: Path) -> AsyncIterator[McpTools]:
    specs: list[ToolSpec] = []
    connected: list[_Live] = []
    async with AsyncExitStack() as stack:
        for server in load_policy(policy_path):
            holder: list[_Live] = []

            async def on_message(message: Any, holder: list[_Live] = holder) -> None:
                if getattr(message, "method", "") == "notifications/tools/list_changed" and holder:
                    await holder[0].recheck()

            target = server_target(server)
            try:
                client = await stack.enter_async_context(Client(target, message_handler=on_message))
                listed = await client.list_tools()
            except Exception as exc:
                raise McpPolicyError(f"MCP server {server.name!r}: cannot connect or list its tools "
                                     f"({type(exc).__name__})") from None
            live = _Live(server, client, {}, policy_path)
            holder.append(live)
            actions: list[ActionSpec] = []
            for tool in listed.tools:
                policy = server.tools.get(tool.name)
                if policy is None:
                    _log.info("MCP server %s offers %s, which the policy does not name: not offered", server.name, tool.name)
                    continue
                digest = schema_hash(tool.input_schema)
                if policy.schema_sha256 is not None and policy.schema_sha256 != digest:
                    raise McpPolicyError(f"MCP server {server.name!r}: {tool.name}'s schema is not the one the policy "
                                         f"pins (it is now {digest})")
                live.accepted[tool.name] = digest
                actions.append(_action(live, tool, policy))
            if actions:
                specs.append(ToolSpec(name=server.name, description=f"The {server.name} service.",
                                      capability_phrase=f"use {server.name.replace('_', ' ')}",
                                      actions=tuple(actions), id_kinds=server.id_kinds))
            connected.append(live)
        # Entered after the sessions and left before them: the watchers end before any session closes.
        async with anyio.create_task_group() as watchers:
            for live in connected:
                watchers.start_soon(_watch, live)
            try:
                yield McpTools(specs, connected)
            finally:
                watchers.cancel_scope.cancel()
        for live in connected:
            await live.close_owner_sessions()
