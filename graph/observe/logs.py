"""Log lines an operator can read and a log pipeline can parse.

Every line carries its time, level and logger, and the ids of the turn it belongs to (owner,
thread, turn, approval: :mod:`graph.observe.scope`). ``TOLLGATE_LOG_FORMAT=json`` writes one
JSON object a line (python-json-logger); the default is a readable line. Tollgate's own log
calls never pass argument values, message text or credentials; as a second line of defence
anything shaped like a bearer credential is masked before a line is written.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Final, Literal

from pythonjsonlogger.json import JsonFormatter

from tollgate.graph.observe import scope

__all__ = ["configure_logging", "masked"]

_SCOPE_FIELDS: Final = ("owner_id", "thread_id", "turn_id", "approval_id")
_CHATTY: Final = ("procrastinate", "psycopg.pool")
# Tollgate's tokens (``tg_`` + 43 URL-safe characters), and any ``Bearer``/``Basic`` credential.
_CREDENTIAL: Final = re.compile(r"\btg_[A-Za-z0-9_-]{20,}|\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)


def masked(text: str) -> str:
    """``text`` with anything shaped like a bearer credential replaced by ``[redacted]``."""
    return _CREDENTIAL.sub("[redacted]", text)


class _ScopeFilter(logging.Filter):
    """Adds the current scope's ids to each record (as ``owner_id``... attributes), and masks credentials."""

    def filter(self, record: logging.LogRecord) -> bool:
        found = scope.current()
        fields = found.fields() if found is not None else {}
        for name in _SCOPE_FIELDS:
            if not hasattr(record, name):
                setattr(record, name, fields.get(name, ""))
        message = record.getMessage()
        if _CREDENTIAL.search(message):
            record.msg, record.args = masked(message), None
        return True


class _Readable(logging.Formatter):
    """``2026-12-02 17:20:01,123 INFO tollgate.web: message [thread=… turn=…]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = " ".join(f"{name.removesuffix('_id')}={getattr(record, name)}" for name in _SCOPE_FIELDS
                       if getattr(record, name, ""))
        return f"{line} [{ids}]" if ids else line


def _json() -> logging.Formatter:
    # Only the fields named here are written (plus ``extra`` keys a caller passes): never the
    # record's arguments as such.
    return JsonFormatter(
        "%(levelname)s %(name)s %(message)s",
        timestamp="time",  # ISO 8601, UTC
        rename_fields={"levelname": "level", "name": "logger"},
        defaults=dict.fromkeys(_SCOPE_FIELDS, ""),
        reserved_attrs=[*logging.LogRecord("", 0, "", 0, "", (), None).__dict__, "message", "taskName",
                        "color_message"],  # uvicorn's copy of its message with terminal colours
    )


def configure_logging(fmt: Literal["text", "json"] = "text", level: str = "INFO") -> None:
    """Send every logger's lines (uvicorn's too) to standard error in ``fmt``, from ``level`` up.

    Replaces the root logger's handlers: called once, as a process starts (``tollgate serve``,
    ``worker``, ``chat``; ``langgraph dev`` keeps its own logging).
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_ScopeFilter())
    handler.setFormatter(_json() if fmt == "json" else _Readable())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    # The job queue's and the pool's own INFO lines narrate their internals (blueprints loaded,
    # connections opened): kept for DEBUG, their warnings always.
    for name in _CHATTY:
        logging.getLogger(name).setLevel("DEBUG" if level.upper() == "DEBUG" else "WARNING")

