"""Start-up errors as one or two sentences a person can act on: which variable, and what to set.

Every Tollgate command (``serve``, ``chat``, ``worker``, ``migrate``...) turns a configuration
error into :func:`explain`'s sentence and exits 2; ``tollgate --debug`` shows the traceback
instead. Nothing here echoes a value: an environment variable may hold a secret.
"""

from __future__ import annotations

import json
import re

from pydantic import ValidationError
from pydantic_settings import SettingsError

from tollgate.graph.models.model_settings import ModelConfigError
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import DatabaseUnreachable, ToolMigrationChanged
from tollgate.policies.approval_rules import RulesError

__all__ = ["ConfigError", "explain"]

_FIELD = re.compile(r'field "(?P<field>\w+)"')
_PROVIDERS_HINT = 'a JSON list such as [{"name": "local", "base_url": "http://localhost:8000/v1", "model": "m"}]'
_JSON_HINTS = {"picker_providers": _PROVIDERS_HINT, "naturalizer_providers": _PROVIDERS_HINT}


class ConfigError(Exception):
    """A configuration problem found at start-up; the message is what to tell the person."""


def env_name(field: str) -> str:
    """The environment variable that sets a :class:`Settings` field."""
    info = Settings.model_fields.get(field)
    if info is not None and isinstance(info.validation_alias, str):
        return info.validation_alias
    return f"TOLLGATE_{field.upper()}"


def _settings_error(exc: SettingsError) -> str:
    found = _FIELD.search(str(exc))
    name = env_name(found["field"]) if found else "a TOLLGATE_ variable"
    cause = exc.__cause__
    if isinstance(cause, json.JSONDecodeError):
        hint = _JSON_HINTS.get(found["field"] if found else "", "valid JSON")
        return (f"{name} is not valid JSON ({cause.msg} at line {cause.lineno}, column {cause.colno}). "
                f"Set it to {hint}.")
    return f"{name} could not be read: set it to valid JSON or unset it."


def _where(loc: tuple[int | str, ...]) -> str:
    parts = [f"item {part + 1}" if isinstance(part, int) else str(part) for part in loc[1:]]
    return f" ({', '.join(parts)})" if parts else ""


def _validation_error(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors(include_input=False, include_url=False):
        loc = error["loc"]
        name = env_name(str(loc[0])) if loc else "the settings"
        lines.append(f"{name}{_where(loc)}: {error['msg']}.")
    return " ".join(lines[:2]) + (f" ({len(lines) - 2} more)" if len(lines) > 2 else "")


def explain(exc: BaseException) -> str | None:
    """The sentence for a configuration error, or ``None`` if ``exc`` is not one (a bug: show it)."""
    from tollgate.tools.loading import ToolLoadError  # tools import the graph's settings; keep this module light

    if isinstance(exc, SettingsError):
        return _settings_error(exc)
    if isinstance(exc, ValidationError) and exc.title == Settings.__name__:
        return _validation_error(exc)
    if isinstance(exc, ModelConfigError | ToolLoadError | RulesError | DatabaseUnreachable | ToolMigrationChanged | ConfigError):
        return str(exc)
    return None
