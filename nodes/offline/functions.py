"""The actions the offline picker can emit, and how they map onto the functions actually bound.

The picker thinks in canonical ``(tool, action)`` keys (the built-in registry's names). At call
time it only ever emits a function that was bound: the canonical name, a known alias, or a
bound function of the same tool whose parameters are exactly the action's argument model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel

from tollgate.tools import args as a

__all__ = ["KNOWN", "ActionKey", "KnownAction", "bound_functions", "known_function_schemas", "resolve_function"]

ActionKey = tuple[str, str]
"""A canonical ``(tool, action)`` pair."""


@dataclass(frozen=True, slots=True)
class KnownAction:
    """One action the offline picker can route to."""

    args: type[BaseModel]
    """Its closed argument model (every emitted call validates against it)."""
    writes: bool
    """Whether it changes data (negatives must never produce one)."""
    aliases: tuple[str, ...] = ()
    """Other action names a registry might use for it."""


KNOWN: Final[dict[ActionKey, KnownAction]] = {
    ("calendar", "list"): KnownAction(a.CalendarListArgs, False, ("list_events", "events")),
    ("calendar", "get"): KnownAction(a.CalendarGetArgs, False, ("get_event", "read", "read_event")),
    ("calendar", "create"): KnownAction(a.CalendarCreateArgs, True, ("create_event", "add_event")),
    ("calendar", "update"): KnownAction(a.CalendarUpdateArgs, True, ("update_event", "move_event")),
    ("calendar", "cancel_event"): KnownAction(a.CalendarCancelArgs, True, ("cancel",)),
    ("mail", "list"): KnownAction(a.MailListArgs, False, ("list_messages", "list_mail")),
    ("mail", "read"): KnownAction(a.MailReadArgs, False, ("read_message", "get")),
    ("mail", "send"): KnownAction(a.MailSendArgs, True, ("send_message", "send_mail")),
    ("mail", "trash"): KnownAction(a.MailTrashArgs, True, ("trash_messages", "trash_message")),
    ("mail", "mark_read"): KnownAction(a.MailMarkReadArgs, True, ("mark_as_read",)),
    ("tasks", "list"): KnownAction(a.TaskListArgs, False, ("list_tasks",)),
    ("tasks", "create"): KnownAction(a.TaskCreateArgs, True, ("create_task", "add")),
    ("tasks", "complete"): KnownAction(a.TaskCompleteArgs, True, ("complete_task", "done")),
    ("reminders", "list"): KnownAction(a.ReminderListArgs, False, ("list_reminders",)),
    ("reminders", "create"): KnownAction(a.ReminderCreateArgs, True, ("create_reminder",)),
    ("reminders", "cancel"): KnownAction(a.ReminderCancelArgs, True, ("cancel_reminder",)),
    ("reminders", "snooze"): KnownAction(a.ReminderSnoozeArgs, True, ("snooze_reminder",)),
}
"""Every action the picker knows, by canonical key."""

_TOOL_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "calendar": ("calendar", "events"),
    "mail": ("mail", "email", "gmail"),
    "tasks": ("tasks", "todo", "task"),
    "reminders": ("reminders", "reminder"),
}


def _parameters_of(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    schema["additionalProperties"] = False
    return schema


def known_function_schemas() -> list[dict[str, Any]]:
    """OpenAI-style schemas of every known action under its canonical name (for tests)."""
    return [
        {
            "type": "function",
            "function": {
                "name": f"{tool}__{action}",
                "description": (known.args.__doc__ or "").strip(),
                "parameters": _parameters_of(known.args),
            },
        }
        for (tool, action), known in KNOWN.items()
    ]


def bound_functions(tools: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Function name -> parameters schema, from OpenAI-style tool dicts (others are ignored)."""
    out: dict[str, Mapping[str, Any]] = {}
    for tool in tools:
        function = tool.get("function") if tool.get("type") == "function" else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            params = function.get("parameters")
            out[function["name"]] = params if isinstance(params, Mapping) else {}
    return out


def _same_fields(params: Mapping[str, Any], model: type[BaseModel]) -> bool:
    props = params.get("properties")
    return isinstance(props, Mapping) and set(props) == set(model.model_fields)


def resolve_function(key: ActionKey, bound: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The bound function that serves ``key``, or ``None`` when none was offered."""
    tool, action = key
    known = KNOWN[key]
    tools = _TOOL_ALIASES.get(tool, (tool,))
    for tool_name in tools:
        for action_name in (action, *known.aliases):
            name = f"{tool_name}__{action_name}"
            if name in bound and _same_fields(bound[name], known.args):
                return name
    # A registry with other names: a function of the same tool whose fields are exactly this
    # action's, and whose name shares the action's verb (get/cancel share their fields).
    verb = action.split("_")[0]
    candidates = [
        name
        for name, params in bound.items()
        if name.split("__")[0] in tools and _same_fields(params, known.args) and verb in name.split("__")[-1]
    ]
    return candidates[0] if len(candidates) == 1 else None
