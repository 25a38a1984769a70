"""The built-in tools and the default registry built from them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from tools.calendar import CALENDAR
from tools.mail import MAIL
from tools.registry import Registry, ToolSpec
from tools.reminders import REMINDERS
from tools.tasks import TASKS

__all__ = ["builtin_tools", "default_registry"]


def builtin_tools() -> tuple[ToolSpec, ...]:
    """The built-in tools backed by Tollgate's own tables: calendar, mail, tasks, reminders."""
    return (CALENDAR, MAIL, TASKS, REMINDERS)


def default_registry(settings: Mapping[str, Any] | BaseModel | None = None) -> Registry:
    """A registry of the built-in tools enabled for ``settings`` (a mapping or a settings model)."""
    values = settings.model_dump() if isinstance(settings, BaseModel) else settings
    return Registry(builtin_tools(), values)
