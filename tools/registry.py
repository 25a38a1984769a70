"""The tool registry: the one source of schemas, menus, tiers and the capability summary.

A tool is data plus functions, registered once. Everything the model sees (function
schemas, usage examples, the "what can you do" summary) and everything policy sees (the
tier map, id fields, idempotency) is a projection of the :class:`Registry`. Policy metadata
(tier, id kinds) is never sent to the model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, get_args

import re
import string
from types import MappingProxyType

from psycopg import AsyncConnection
from pydantic import BaseModel

from tollgate.policies.fencing import fence, new_nonce
from typing_extensions import NotRequired, TypedDict  # pydantic needs these on Python < 3.12

from tollgate.policies.ids import check_id_path

if TYPE_CHECKING:
    from tollgate.tools.perimeter.egress_transport import EgressClient
from tollgate.policies.tiers import Effect, Tier, looks_destructive

__all__ = [
    "ActionResult",
    "ActionSpec",
    "Credentials",
    "ExecContext",
    "Executor",
    "IdKind",
    "Previewer",
    "Reconciled",
    "Reconciler",
    "Registry",
    "Renderer",
    "ResultRow",
    "ToolSpec",
    "function_name",
    "strict_function_schema",
    "template_preview",
]


class ResultRow(TypedDict):
    """One row of a list result, as stored in the thread's recent list and shown to the model."""

    id: str
    """The store's own id for the item (the only ids id-validation will bind); an integer id is
    accepted too and kept in the thread as its digits."""
    label: str
    """A short, grounded one-line description rendered by the server."""


class ActionResult(TypedDict):
    """What an executor returns; stored in graph state, so plain JSON values only."""

    tool: str
    """The tool that ran."""
    action: str
    """The action that ran."""
    kind: Literal["list", "item", "write"]
    """A list (updates the recent list), a single item read, or a write."""
    summary: str
    """One grounded sentence describing what happened (used by renderers and the honesty gate)."""
    rows: NotRequired[list[ResultRow]]
    """The rows of a list result, in display order (position 1 first)."""
    list_kind: NotRequired[str]
    """For list results: which recent list (``calendar``, ``mail``...) these rows replace."""
    item: NotRequired[dict[str, Any]]
    """For item reads and writes: the item's fields as JSON values."""
    changed: NotRequired[int]
    """For writes: how many items the write changed (0 when it was already in that state)."""
    item_kind: NotRequired[str]
    """For item reads and writes: the id kind of ``item["id"]``; that id becomes bindable in the
    thread (act on the event just created, the message just read)."""
    content: NotRequired[Any]
    """Structured content beside rows and item (JSON values, size-capped when stored), shown to
    the model fenced as data, never as instructions."""


@dataclass(frozen=True, slots=True)
class ExecContext:
    """Everything an executor or previewer may use. Identity comes from the run context."""

    owner_id: str
    """The owner whose data this call may touch; every query is scoped to it."""
    timezone: str
    """The owner's IANA timezone, for rendering and relative dates."""
    now: datetime
    """The server's clock at the start of the call (timezone-aware)."""
    conn: AsyncConnection[Any] | None
    """For tools that ask for one (``ToolSpec.database``): a connection inside the call's
    transaction (read-only for previews); ``None`` otherwise."""
    idempotency_key: str | None = None
    """For writes: the key of the write's ledger row. A remote write passes it on (an
    ``Idempotency-Key`` header, a client token) so the remote side can refuse a duplicate, and
    its ``reconcile`` hook can look for it."""
    http: EgressClient | None = None
    """HTTP through the egress gate (the operator's allowlist, caps on size and time)."""
    credentials: Credentials | None = None
    """The owner's secrets for this tool (stored encrypted), read by name."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """For previews: the label each id had in the thread's latest lists (what the owner saw)."""
    service: Any = None
    """This owner's service object of the tool (its API client, its account), from
    :attr:`ToolSpec.service_for`; ``None`` for a tool that declares none."""

    @property
    def db(self) -> AsyncConnection[Any]:
        """The call's connection; raises ``RuntimeError`` for a tool that did not ask for one."""
        if self.conn is None:
            raise RuntimeError("this tool has no database connection (set database=True on its ToolSpec)")
        return self.conn


class Credentials(Protocol):
    """An owner's secrets for one tool (``ExecContext.credentials``)."""

    async def get(self, name: str) -> str | None:
        """The secret called ``name``, or ``None`` when the owner has not set it."""
        ...


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What a ``reconcile`` hook found about a remote write that was interrupted."""

    outcome: Literal["done", "not_done", "unknown"]
    """It happened, it did not, or the remote side cannot say."""
    result: ActionResult | None = None
    """For ``done``: the result to record (what the remote side reports)."""

    @classmethod
    def done(cls, result: ActionResult) -> Reconciled:
        """The write happened; ``result`` is what it did."""
        return cls("done", result)

    @classmethod
    def not_done(cls) -> Reconciled:
        """The write did not happen (nothing to undo)."""
        return cls("not_done")

    @classmethod
    def unknown(cls) -> Reconciled:
        """The remote side cannot tell."""
        return cls("unknown")


Executor = Callable[[ExecContext, Any], Awaitable[ActionResult]]
"""Runs an action with validated args; raises a ``TollgateError`` subclass on failure."""
Reconciler = Callable[[ExecContext, Any], Awaitable[Reconciled]]
"""Finds out whether an interrupted remote write happened (by its ``idempotency_key``); reads only."""
Previewer = Callable[[ExecContext, Any], Awaitable[str]]
"""Renders the approval preview for a write, reading (never writing) the store."""
Renderer = Callable[[ActionResult], str]
"""Turns a result into a grounded reply without a model."""


class _PreviewFormatter(string.Formatter):
    """``str.format`` with lists joined by commas, and ``:label`` showing an id as the server listed it."""

    def __init__(self, labels: Mapping[str, str]) -> None:
        self.labels = labels

    def format_field(self, value: Any, format_spec: str) -> str:
        items = value if isinstance(value, list) else [value]
        if format_spec == "label":
            return ", ".join(self.labels.get(str(v), str(v)) for v in items)
        if isinstance(value, list):
            return ", ".join(map(str, items))
        return str(super().format_field(value, format_spec))


def template_preview(template: str) -> Previewer:
    """A preview from a template over the arguments: ``"Share {file_id:label} with {email}"``.

    Fields name arguments (``{share[file_id]}`` reaches into a nested one); a list argument is
    shown joined by commas. ``:label`` shows an id as the thread's list showed it (its label,
    rendered by the tool when it listed the item), so a reviewer reads "packing-list.docx", not
    an id; an id that no list showed is shown as itself. A field the arguments lack fails the
    preview (and so the proposal), never silently.
    """
    for _, field_name, spec, _ in string.Formatter().parse(template):
        if field_name is not None and ("." in field_name or not field_name.split("[")[0].isidentifier()):
            raise ValueError(f"preview template field {field_name!r} must name an argument")
        if spec not in (None, "", "label"):
            raise ValueError(f"preview template spec {spec!r}: only ':label' is understood")

    async def preview(ctx: ExecContext, args: Any) -> str:
        values = args.model_dump(mode="json") if isinstance(args, BaseModel) else dict(args)
        return _PreviewFormatter(ctx.labels).vformat(template, (), values)

    return preview


_DEFAULT_ID_PATTERN: Final = r"[A-Za-z0-9_-]{1,63}"


@dataclass(frozen=True, slots=True)
class IdKind:
    """A kind of id (``calendar`` events, ``mail`` messages, a plug-in's ``file`` ids): what one looks like.

    Ids carry no authority whatever their shape: a call binds only ids the server returned in
    the thread (:mod:`policies.ids`). The shape is checked first, so a malformed reference gets
    a precise refusal.
    """

    name: str
    """The kind's name, as ``id_fields`` and results (``list_kind``, ``item_kind``) name it."""
    pattern: str = _DEFAULT_ID_PATTERN
    """A regular expression an id must match in full (``[0-9]+``, ``[^\\s]+@[^\\s]+``...)."""
    validator: Callable[[str], bool] | None = None
    """Optional further check of an id (after the pattern)."""
    noun: str = ""
    """What the user calls one ("event", "file"); the name when empty."""
    positions: bool = True
    """Whether ``"#2"`` may mean the 2nd row of the latest list; must be off when ids can look like that."""
    owner_typed: bool = False
    """Whether an id the owner typed in their request binds although no tool returned it in the
    thread, once ``pattern`` and ``validator`` confirm it (an order number, a ticket id). Off by
    default: only what the server returned binds. Never what the model or a tool result wrote."""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"id kind {self.name!r} must be an identifier")
        try:
            compiled = re.compile(self.pattern)
        except re.error as exc:
            raise ValueError(f"id kind {self.name!r}: bad pattern ({exc})") from None
        if self.positions and compiled.fullmatch("#1"):
            raise ValueError(f"id kind {self.name!r}: its ids can look like a position ('#1'); set positions=False")

    def accepts(self, value: str) -> bool:
        """Whether ``value`` has the shape of an id of this kind."""
        if len(value) > 512 or re.fullmatch(self.pattern, value) is None:
            return False
        return self.validator is None or bool(self.validator(value))

    @property
    def label(self) -> str:
        """The noun for messages."""
        return self.noun or self.name


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """One action of a tool: its closed argument model, its tier and its functions."""

    name: str
    """Action name, unique within the tool (``list``, ``cancel_event``...)."""
    description: str
    """What the action does, for the model's function description."""
    args: type[BaseModel]
    """The frozen, closed pydantic model of the arguments."""
    tier: Tier
    """The server's classification; never sent to the model."""
    executor: Executor
    """Runs the action."""
    renderer: Renderer
    """Grounded reply for a result of this action."""
    usage_examples: tuple[str, ...]
    """Natural requests that should route here (shown to the model, checked by tests)."""
    id_fields: Mapping[str, str] = field(default_factory=dict)
    """Argument path -> id kind whose membership id validation enforces. A path is a field
    (``event_id``; a list field means each element), a nested field (``share.file_id``) or a
    field of each list element (``items[].file_id``): every id found is checked, all or nothing."""
    preview: Previewer | None = None
    """Server-rendered approval preview; required for confirmation-tier actions."""
    idempotent: bool = True
    """Whether a retry after a transient failure is safe."""
    changes_state: bool = False
    """For a read: calling it changes what it reads as a side effect (fetching unread mail marks it
    read on the server). It runs like a read (no approval for the allowlist tier), but is never
    retried, and the audit records the call as one that changed state."""
    effect: Effect = "read"
    """What the action does to data, declared by its author: ``read``; ``write`` (changes data
    reversibly or sends on the owner's behalf: it runs under the idempotency ledger); or
    ``destructive`` (destroys client data beyond recovery: the tier gate refuses it whatever
    its tier). The name never decides."""
    remote: bool = False
    """Set for a write of a database tool whose effect also leaves Tollgate (a write of a tool
    without Tollgate's database is remote anyway): it is recorded as an intent before it runs."""
    outbound_fields: tuple[str, ...] = ()
    """Arguments of a read whose values leave Tollgate although the tool keeps a database of its
    own (a query it forwards to a partner's API): the read is then judged as an outbound read (the
    flow check, DLP across calls) on these fields. A tool without a database sends every argument
    out anyway, whatever this says."""
    third_party: bool = False
    """Its results are someone else's content (pages, search results, messages from others):
    approval cards warn when a value comes from them. Items naming a sender other than the owner
    (``"from"``) count as someone else's whatever the action declares."""
    third_party_fields: tuple[str, ...] = ()
    """Fields of its result's item that hold someone else's text when set (an event's
    description, written by whoever sent the invitation)."""
    source_label: str | None = None
    """How an approval card names the source of this action's results (``MCP server pantry,
    tool list``); by default the card names the item (a mail's sender and subject, a page's host
    and path, a file's name)."""
    source_nouns: tuple[str, ...] = ()
    """Words a request names this action's results by (``transaction``, ``statement``), beside the
    words of the item's name: content a request names is said on the card, not warned about."""
    intent_words: tuple[str, ...] = ()
    """Words that, in a person's request, ask for this action (``pay``, ``transfer`` for a
    payment), beside those :func:`policies.intent.intent_words` derives from its name and usage
    examples. A write that the request did not ask for, proposed after the turn read someone
    else's content, is flagged on its card."""
    kinds_for: Callable[[str], Mapping[str, str]] | None = None
    """For a tool whose store is chosen per owner: the id kinds this owner's ids are instead of
    the ones ``id_fields`` names (``{"mail": "imap_mail"}``: an owner's own server has ids of
    its own kind, which bind only against what that server returned). See :meth:`id_fields_of`."""
    remote_for: Callable[[str], bool] | None = None
    """For a tool whose store is chosen per owner (Tollgate's tables, or the owner's own server):
    whether this owner's calls leave Tollgate. For that owner a write then runs as a remote write
    (intent first, ``reconcile`` after a crash) and a read holds no database connection while the
    remote server answers; ``remote`` means every owner."""
    reconcile: Reconciler | None = None
    """For a remote write: after a crash between the remote call and its record, says whether it
    happened. Without it such a write ends ``unknown`` and the owner is told so."""
    described_by: str | None = None
    """Who wrote its description, when that is not the tool's author (``MCP server pantry, tool
    add``): someone else's words, offered to the model fenced as DATA, never as instructions."""
    description_withheld: bool = False
    """Its provider's own description read as instructions to an assistant (an MCP server's tool
    text is someone else's content): the model was offered a neutral one, and every card of a call
    of it says so."""
    destructive_name_acknowledged: bool = False
    """Set when a name that reads as a hard delete (``delete_email``) really declares a milder
    effect (it moves mail to the trash); without it such an action refuses to register."""

    def leaves_tollgate(self, owner_id: str) -> bool:
        """Whether ``owner_id``'s call of this action is remote (``remote``, or ``remote_for`` says so)."""
        return self.remote or (self.remote_for is not None and self.remote_for(owner_id))

    def id_fields_of(self, owner_id: str) -> Mapping[str, str]:
        """``id_fields`` with each kind as ``owner_id``'s ids are (``kinds_for``): the ids a call of theirs binds."""
        own = self.kinds_for(owner_id) if self.kinds_for is not None else {}
        return {path: own.get(kind, kind) for path, kind in self.id_fields.items()} if own else self.id_fields

    @property
    def writes(self) -> bool:
        """Whether the action changes data (``write`` or ``destructive``)."""
        return self.effect != "read"

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"action name {self.name!r} must be an identifier")
        if self.tier not in get_args(Tier):  # a misspelt tier would leave the action refused as unclassified
            raise ValueError(f"action {self.name!r}: tier must be one of {', '.join(get_args(Tier))}, not {self.tier!r}")
        if self.effect not in ("read", "write", "destructive"):
            raise ValueError(f"action {self.name!r}: effect must be read, write or destructive, not {self.effect!r}")
        if looks_destructive(self.name) and self.effect != "destructive" and not self.destructive_name_acknowledged:
            raise ValueError(
                f"action {self.name!r} reads as a hard delete but declares effect={self.effect!r}: declare "
                "effect='destructive', or set destructive_name_acknowledged=True if it is reversible"
            )
        if self.changes_state and self.effect != "read":
            raise ValueError(f"action {self.name!r}: changes_state describes a read; a write changes state anyway")
        if self.tier == "confirmation" and self.preview is None:
            raise ValueError(f"confirmation action {self.name!r} needs a preview")
        fields = self.args.model_fields
        for path in self.id_fields:
            first = check_id_path(path)[0].removesuffix("[]")
            if first not in fields:
                raise ValueError(f"id field {path!r} is not an argument of {self.name!r}")
        for name in self.outbound_fields:
            if name not in fields:
                raise ValueError(f"outbound field {name!r} is not an argument of {self.name!r}")
        if self.args.model_config.get("extra") != "forbid":
            raise ValueError(f"arguments of {self.name!r} must forbid extra keys")
        if not self.args.model_config.get("frozen"):
            raise ValueError(f"arguments of {self.name!r} must be frozen")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool: a name, a capability phrase for "what can you do", and its actions."""

    name: str
    """Tool name (``calendar``, ``mail``...)."""
    description: str
    """One line on what the tool covers."""
    capability_phrase: str
    """How the capability summary names it ("check and manage your calendar")."""
    actions: tuple[ActionSpec, ...]
    """The tool's actions."""
    enabled: Callable[[Mapping[str, Any]], bool] = lambda _settings: True
    """Whether the tool is on for these settings."""
    database: bool = False
    """Whether its executors and previews get a database connection (``ExecContext.conn``);
    tools that keep their data elsewhere get none."""
    id_kinds: tuple[IdKind, ...] = ()
    """The id kinds this tool's ids belong to (a kind named but not declared anywhere gets the
    default shape: letters, digits, ``_`` and ``-``, up to 63)."""
    service_for: Callable[[str], Any] | None = None
    """Builds (or looks up) the per-owner service its executors use, given the owner id: it reaches
    them as ``ExecContext.service``, so a plug-in keeps no per-owner state in module globals.
    Called for each call; cache inside it when building one is costly."""
    migrations: tuple[str, ...] = ()
    """SQL steps creating the tool's own tables, applied once each, in order, at start-up
    (append only: an applied step is never edited). A table of owners' rows should end with
    ``SELECT tollgate_owner_rls('the_table')``: row-level security keyed by its ``owner_id``
    column, as on the built-in tables, so the connection the tool gets sees its owner's rows only."""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"tool name {self.name!r} must be an identifier")
        names = [a.name for a in self.actions]
        if len(set(names)) != len(names):
            raise ValueError(f"tool {self.name!r} has duplicate action names")


def strict_function_schema(tool: dict[str, Any]) -> dict[str, Any]:
    """The strict-mode form of a function schema (OpenAI structured outputs).

    Strict mode wants every property listed as required: optional properties become nullable
    instead, and the picker reads ``null`` as "not given". Defaults and titles are dropped.
    """
    import copy

    out = copy.deepcopy(tool)
    params = out["function"]["parameters"]

    def clean(node: Any) -> None:
        if isinstance(node, dict):
            node.pop("default", None)
            node.pop("title", None)
            for value in node.values():
                clean(value)
        elif isinstance(node, list):
            for value in node:
                clean(value)

    required = set(params.get("required", []))
    for key, prop in params.get("properties", {}).items():
        if key not in required:
            options = prop.get("anyOf", [prop])
            if not any(o.get("type") == "null" for o in options):
                params["properties"][key] = {"anyOf": [prop, {"type": "null"}]}
                if "description" in prop:
                    params["properties"][key]["description"] = prop["description"]
    params["required"] = list(params.get("properties", {}))
    params["additionalProperties"] = False
    clean(params)
    out["function"]["strict"] = True
    return out


def function_name(tool: str, action: str) -> str:
    """The function name the model sees for (tool, action)."""
    return f"{tool}__{action}"


class Registry:
    """The enabled tools for one configuration, and every projection of them."""

    def __init__(self, tools: Iterable[ToolSpec], settings: Mapping[str, Any] | None = None) -> None:
        settings = settings or {}
        self._tier_map: Mapping[tuple[str, str], Tier] | None = None
        self._tools: dict[str, ToolSpec] = {}
        self._by_function: dict[str, tuple[ToolSpec, ActionSpec]] = {}
        self._kinds: dict[str, IdKind] = {}
        self._kinds_for: dict[Callable[[str], Mapping[str, str]], None] = {}  # distinct, in order
        self._nonce = new_nonce()  # the fence of descriptions written by others (see function_schemas)
        self.version = 0
        """Grows each time an action is replaced (:meth:`replace_action`): what is built from the
        registry's projections (menus, models with tools bound) is rebuilt when it changes."""
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"tool {tool.name!r} registered twice")
            if not tool.enabled(settings):
                continue
            self._tools[tool.name] = tool
            for action in tool.actions:
                self._by_function[function_name(tool.name, action.name)] = (tool, action)
            self._kinds_for.update(dict.fromkeys(a.kinds_for for a in tool.actions if a.kinds_for is not None))
            for kind in tool.id_kinds:
                if self._kinds.setdefault(kind.name, kind) != kind:
                    raise ValueError(f"id kind {kind.name!r} is declared twice, differently")

    def replace_action(self, tool: str, action: ActionSpec) -> None:
        """Serve ``action`` in place of ``tool``'s action of the same name from now on: an MCP tool
        whose new schema its policy accepted at run time. Its function schema and the tier map
        follow. Refuses an action the registry does not serve (``KeyError``) and one whose tier or
        effect differs (``ValueError``: those are the policy's, never the server's)."""
        spec, old = self._by_function[function_name(tool, action.name)]
        if (old.tier, old.effect) != (action.tier, action.effect):
            raise ValueError(f"{tool}.{action.name}: a replacement keeps the tier and the effect")
        new = replace(spec, actions=tuple(action if a.name == action.name else a for a in spec.actions))
        self._tools[tool] = new
        for a in new.actions:
            self._by_function[function_name(tool, a.name)] = (new, a)
        self._tier_map = None
        self.version += 1

    def id_kind(self, name: str) -> IdKind:
        """The declared kind called ``name`` (the default shape when no tool declares it)."""
        kind = self._kinds.get(name)
        if kind is None:
            kind = self._kinds[name] = IdKind(name)
        return kind

    def own_kinds(self, owner_id: str) -> dict[str, str]:
        """Declared kind -> the kind ``owner_id``'s ids are instead (:attr:`ActionSpec.kinds_for`); empty
        for an owner whose every tool uses the ids it declares."""
        out: dict[str, str] = {}
        for kinds_for in self._kinds_for:
            out.update(kinds_for(owner_id))
        return out

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        """The enabled tools, in registration order."""
        return tuple(self._tools.values())

    def actions(self) -> Iterable[tuple[ToolSpec, ActionSpec]]:
        """Every enabled (tool, action) pair."""
        return self._by_function.values()

    def lookup(self, function: str) -> tuple[ToolSpec, ActionSpec] | None:
        """The (tool, action) behind a function name, or ``None`` for an unknown function."""
        return self._by_function.get(function)

    def tool(self, name: str) -> ToolSpec | None:
        """The enabled tool called ``name``, or ``None``."""
        return self._tools.get(name)

    def action(self, tool: str, action: str) -> ActionSpec | None:
        """The spec of (tool, action), or ``None``."""
        found = self._by_function.get(function_name(tool, action))
        return found[1] if found else None

    def tier_map(self) -> Mapping[tuple[str, str], Tier]:
        """The server's explicit tier map, projected from the specs (computed once)."""
        if self._tier_map is None:
            self._tier_map = MappingProxyType({(t.name, a.name): a.tier for t, a in self.actions()})
        return self._tier_map

    def function_schemas(self, tools: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Closed OpenAI-style function schemas, one per (tool, action) the model may call.

        Tier and id kinds are policy metadata and never appear here.
        """
        wanted = set(tools) if tools is not None else None
        out: list[dict[str, Any]] = []
        for tool, action in self.actions():
            if wanted is not None and tool.name not in wanted:
                continue
            if action.tier in ("mustlist", "blocklist"):
                continue  # never offered: the gate would refuse it anyway
            schema = action.args.model_json_schema()
            schema.pop("title", None)
            schema["additionalProperties"] = False
            examples = "; ".join(f'"{e}"' for e in action.usage_examples[:4])
            described = action.description
            if action.described_by is not None:  # someone else's words: data, as every fenced text
                described = fence("tool_description", {"from": action.described_by, "text": described}, self._nonce)
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": function_name(tool.name, action.name),
                        "description": f"{tool.description} {described} Examples: {examples}",
                        "parameters": schema,
                    },
                }
            )
        return out

    def capability_summary(self) -> str:
        """The reply to "what can you do?", from the registry alone."""
        phrases = [t.capability_phrase for t in self.tools]
        if not phrases:
            return "I have no tools enabled right now."
        body = phrases[0] if len(phrases) == 1 else "; ".join(phrases[:-1]) + "; and " + phrases[-1]
        free = [f"{a.description[:1].lower()}{a.description[1:].rstrip('.')}" for _, a in self.actions()
                if a.writes and a.tier == "allowlist"]
        note = "Anything that changes your data waits for your approval first"
        if free:
            note += " (except: " + "; ".join(free) + ")"
        return f"I can {body}. {note}."
