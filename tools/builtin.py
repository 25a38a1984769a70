"""The built-in tools and the default registry built from them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from tollgate.tools.calendar import CALENDAR
from tollgate.tools.connectors.caldav_calendar import calendar_for
from tollgate.tools.connectors.imap_mail import mail_for
from tollgate.tools.connectors.triggers import triggers_for
from tollgate.tools.mail import MAIL
from tollgate.tools.notes import NOTES
from tollgate.tools.registry import Registry, ToolSpec
from tollgate.tools.reminders import REMINDERS
from tollgate.tools.tasks import TASKS
from tollgate.tools.triggers import TRIGGERS
from tollgate.tools.web import web_tools

__all__ = ["builtin_tools", "default_registry", "enabled_builtins"]


def builtin_tools() -> tuple[ToolSpec, ...]:
    """The built-in tools backed by Tollgate's own tables: calendar, mail, tasks, notes, reminders, triggers.
    (The server-only background offer is the runtime's: :data:`graph.background.offer.BACKGROUND`,
    which :func:`graph.app.build_services` registers beside them.)"""
    return (CALENDAR, MAIL, TASKS, NOTES, REMINDERS, TRIGGERS)


def enabled_builtins(settings: Mapping[str, Any] | None) -> tuple[ToolSpec, ...]:
    """The built-ins for these settings: the store-backed tools (the calendar and mail on each
    owner's backend: Tollgate's tables, or their CalDAV, IMAP and SMTP servers), and the web
    tools (weather, search, fetch), which are off unless the settings turn them on. Trigger
    rules refuse to watch what an owner keeps on their own server."""
    chosen = {CALENDAR.name: calendar_for(settings), MAIL.name: mail_for(settings), TRIGGERS.name: triggers_for(settings)}
    return (*(chosen.get(t.name, t) for t in builtin_tools()), *web_tools(settings))


def default_registry(settings: Mapping[str, Any] | BaseModel | None = None) -> Registry:
    """A registry of the built-in tools alone, enabled for ``settings`` (a mapping or a settings model).

    A process serves :func:`tools.loading.assemble_registry` (built-ins and plug-ins); this is
    the built-ins' own view, for their tests and evals.
    """
    values = settings.model_dump() if isinstance(settings, BaseModel) else settings
    return Registry(enabled_builtins(values), values)
