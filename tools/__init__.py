"""Tollgate's public tool API: what a plug-in imports to give Tollgate a tool to govern.

A tool is a :class:`ToolSpec` of :class:`ActionSpec` s (one function each for the model). Each
action has a closed, frozen argument model (:class:`ArgsModel`, with the bounded field types
:func:`SafeText`, :func:`Count`, :data:`IdRef`), a tier (``allowlist`` runs at once,
``confirmation`` waits for the owner's approval), a declared effect (``read``, ``write``,
``destructive``), an executor that returns an :class:`ActionResult`, and, for a confirmation,
a preview. The server sets identity (:class:`ExecContext`), never the model. Serve tools with
``open_app(settings, tools=[...])``, ``TOLLGATE_TOOLS`` or the ``tollgate.tools`` entry point
(:mod:`tools.loading`); the built-in tools are written the same way. A LangChain tool is
governed with :func:`tools.langchain_tools.from_langchain`.
"""

from policies.arguments import ArgsModel, Count, IdRef, SafeText
from policies.tiers import Effect, Tier
from tools.registry import (
    ActionResult,
    ActionSpec,
    ExecContext,
    IdKind,
    Registry,
    ResultRow,
    ToolSpec,
    template_preview,
)

__all__ = [
    "ActionResult",
    "ActionSpec",
    "ArgsModel",
    "Count",
    "Effect",
    "ExecContext",
    "IdKind",
    "IdRef",
    "Registry",
    "ResultRow",
    "SafeText",
    "Tier",
    "ToolSpec",
    "template_preview",
]
