"""Tollgate's public tool API: what a plug-in imports to give Tollgate a tool to govern.

A tool is a :class:`ToolSpec` of :class:`ActionSpec` s (one function each for the model). Each
action has a closed, frozen argument model (:class:`ArgsModel`, with the bounded field types
:func:`SafeText`, :func:`Count`, :data:`IdRef`), a tier (``allowlist`` runs at once,
``confirmation`` waits for the owner's approval), a declared effect (``read``, ``write``,
``destructive``), an executor that returns an :class:`ActionResult`, and, for a confirmation,
a preview. The server sets identity (:class:`ExecContext`), never the model. Serve tools with
``open_app(settings, tools=[...])``, ``TOLLGATE_TOOLS`` or the ``tollgate.tools`` entry point
(:mod:`tools.loading`); the built-in tools are written the same way. A LangChain tool is
governed with :func:`tools.langchain_tools.from_langchain`. An executor fails with the typed errors
exported here (:class:`NotFound`, :class:`InvalidArgs`, :class:`Transient` — retried for idempotent
work —, :class:`Unavailable`, :class:`PermissionDenied`...); a URL argument Tollgate connects to is
``Annotated[EgressUrl, UrlField()]``, so it passes the egress gate.
"""

from tollgate.policies.arguments import ArgsModel, Count, IdRef, SafeText
from tollgate.policies.egress import EgressUrl, UrlField
from tollgate.policies.errors import (
    EgressDenied,
    InvalidArgs,
    NotFound,
    OutcomeUnknown,
    PermissionDenied,
    TollgateError,
    Transient,
    Unavailable,
)
from tollgate.policies.tiers import Effect, Tier
from tollgate.tools.registry import (
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
    "EgressDenied",
    "EgressUrl",
    "Effect",
    "ExecContext",
    "IdKind",
    "IdRef",
    "InvalidArgs",
    "NotFound",
    "OutcomeUnknown",
    "PermissionDenied",
    "Registry",
    "ResultRow",
    "SafeText",
    "Tier",
    "TollgateError",
    "ToolSpec",
    "Transient",
    "Unavailable",
    "UrlField",
    "template_preview",
]
