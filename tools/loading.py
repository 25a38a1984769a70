"""Where a process's tools come from: the built-ins, and plug-ins from three places.

:func:`assemble_registry` is the one place a registry is put together, so ``tollgate serve``,
``tollgate worker``, ``tollgate chat`` and ``langgraph dev`` all serve the same tools for the
same settings:

1. the built-in tools (:mod:`tools.builtin`), minus those named in ``TOLLGATE_DISABLED_TOOLS``;
2. tools passed in Python (``open_app(settings, tools=[...])``, ``create_app(settings, tools=[...])``);
3. references in ``TOLLGATE_TOOLS`` (a JSON list of ``"package.module:NAME"``);
4. objects registered under the entry-point group ``tollgate.tools`` by installed packages
   (off with ``TOLLGATE_TOOL_ENTRY_POINTS=false``).

Each source is a :class:`~tools.registry.ToolSpec`, a sequence of them, or a callable taking the
settings and returning either. Anything that cannot be loaded, a name registered twice, or a
disabled name that is no built-in refuses to start with a :class:`ToolLoadError` saying which
source is at fault: a typo must not quietly serve fewer (or other) tools than configured.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import entry_points
from typing import Any, Final

from pydantic import BaseModel

from tollgate.tools.registry import Registry, ToolSpec

__all__ = ["ENTRY_POINT_GROUP", "ToolLoadError", "ToolSource", "assemble_registry", "load_reference", "plugin_tools"]

ENTRY_POINT_GROUP: Final = "tollgate.tools"
"""The entry-point group a package registers its tools under."""

ToolSource = ToolSpec | Iterable[ToolSpec] | Callable[[Any], "ToolSpec | Iterable[ToolSpec]"]
"""A tool, several, or a callable that builds them from the settings."""


class ToolLoadError(ValueError):
    """A configured tool source could not be loaded, or its tools conflict; the process does not start."""


def load_reference(ref: str) -> object:
    """The object behind ``"package.module:NAME"`` (``NAME`` may be dotted). Raises :class:`ToolLoadError`."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ToolLoadError(f"tool reference {ref!r} must look like 'package.module:NAME'")
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolLoadError(f"tool reference {ref!r}: cannot import {module_name!r} ({exc})") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ToolLoadError(f"tool reference {ref!r}: {module_name!r} has no {attr!r}") from None
    return obj


def _specs(source: object, settings: Any, where: str) -> tuple[ToolSpec, ...]:
    if callable(source) and not isinstance(source, ToolSpec):
        try:
            source = source(settings)
        except ToolLoadError:
            raise
        except Exception as exc:
            raise ToolLoadError(f"{where}: building its tools failed ({type(exc).__name__}: {exc})") from None
    if isinstance(source, ToolSpec):
        return (source,)
    if isinstance(source, (str, bytes, Mapping)) or not isinstance(source, Iterable):
        raise ToolLoadError(f"{where}: expected a ToolSpec, a sequence of them or a callable, not {type(source).__name__}")
    specs = tuple(source)
    for spec in specs:
        if not isinstance(spec, ToolSpec):
            raise ToolLoadError(f"{where}: expected ToolSpec items, found {type(spec).__name__}")
    return specs


def plugin_tools(
    settings: Any, tools: Iterable[object] = (), *, references: Iterable[str] = (), use_entry_points: bool = True
) -> list[tuple[str, ToolSpec]]:
    """Every plug-in tool with where it came from: ``tools``, then ``references``, then the entry points.

    ``settings`` is what a callable source is called with.
    """
    found: list[tuple[str, ToolSpec]] = []
    for index, source in enumerate(tools):
        where = f"tools argument #{index + 1}"
        found += [(where, spec) for spec in _specs(source, settings, where)]
    for ref in references:
        where = f"TOLLGATE_TOOLS entry {ref!r}"
        found += [(where, spec) for spec in _specs(load_reference(ref), settings, where)]
    if use_entry_points:
        for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
            where = f"entry point {point.name!r} of {point.dist.name if point.dist else 'an unknown package'}"
            try:
                loaded = point.load()
            except Exception as exc:
                raise ToolLoadError(f"{where}: cannot load {point.value!r} ({type(exc).__name__}: {exc})") from None
            found += [(where, spec) for spec in _specs(loaded, settings, where)]
    return found


def assemble_registry(settings: Mapping[str, Any] | BaseModel | None = None, tools: Iterable[object] = ()) -> Registry:
    """The registry of one process: the enabled built-ins, then every plug-in (see the module doc).

    Raises :class:`ToolLoadError` for an unloadable source, a tool name registered twice
    (naming both sources) or a disabled name that is not a built-in.
    """
    from tollgate.tools.builtin import enabled_builtins

    values = settings.model_dump() if isinstance(settings, BaseModel) else dict(settings or {})
    disabled = set(values.get("disabled_tools") or ())
    builtins = enabled_builtins(values)
    unknown = disabled - {t.name for t in builtins}
    if unknown:
        raise ToolLoadError(f"TOLLGATE_DISABLED_TOOLS names no built-in tool: {', '.join(sorted(unknown))}")
    sources: dict[str, str] = {}
    chosen: list[ToolSpec] = []
    plugins = plugin_tools(settings, tools, references=values.get("tools") or (),
                           use_entry_points=values.get("tool_entry_points", True))
    for where, spec in [("built-in", t) for t in builtins if t.name not in disabled] + plugins:
        if spec.name in sources:
            raise ToolLoadError(f"tool {spec.name!r} is registered twice: by {sources[spec.name]} and by {where}")
        sources[spec.name] = where
        chosen.append(spec)
    try:
        return Registry(chosen, values)
    except ValueError as exc:
        raise ToolLoadError(str(exc)) from None

