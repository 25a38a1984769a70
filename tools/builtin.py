"""The built-in tools and the default registry built from them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from graph.background.offer import BACKGROUND
from tools.calendar import CALENDAR
from tools.mail import MAIL
from tools.registry import Registry, ToolSpec
from tools.reminders import REMINDERS
from tools.tasks import TASKS
from tools.triggers import TRIGGERS
from tools.web import web_tools

__all__ = ["builtin_tools", "default_registry", "web_tools"]


def builtin_tools() -> tuple[ToolSpec, ...]:
    """The built-in tools backed by Tollgate's own tables: calendar, mail, tasks, reminders, triggers, and
    the server-only background offer."""
    return (CALENDAR, MAIL, TASKS, REMINDERS, TRIGGERS, BACKGROUND)


def default_registry(settings: Mapping[str, Any] | BaseModel | None = None) -> Registry:
    """A registry of the built-in tools alone, enabled for ``settings`` (a mapping or a settings model).

    A process serves :func:`tools.loading.assemble_registry` (built-ins and plug-ins); this is
    the built-ins' own view, for their tests and evals. The web tools (weather, search, fetch)
    are off unless settings turn them on.
    """
    values = settings.model_dump() if isinstance(settings, BaseModel) else settings
    return Registry((*builtin_tools(), *web_tools(values)), values)
