"""Versioned SQL migrations for Tollgate's own tables.

Each migration is a file ``NNNN_name.sql`` in this folder; its number is its version (the
index in :data:`MIGRATIONS`) and its first line, a ``-- `` comment, is its one-line summary.
Append only: a released migration is never edited. The LangGraph checkpointer keeps its own
tables and migrations (``AsyncPostgresSaver.setup``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

__all__ = ["MIGRATIONS", "SUMMARIES"]

_DIR = Path(__file__).resolve().parent
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


def _load() -> tuple[tuple[str, ...], tuple[str, ...]]:
    files = sorted(p for p in _DIR.iterdir() if _NAME.match(p.name))
    sql: list[str] = []
    summaries: list[str] = []
    for index, path in enumerate(files):
        match = _NAME.match(path.name)
        number = int(match.group(1)) if match else -1
        if number != index:
            raise RuntimeError(f"migration {path.name!r} is out of sequence: expected number {index:04d}")
        text = path.read_text()
        first = text.splitlines()[0] if text else ""
        if not first.startswith("-- "):
            raise RuntimeError(f"migration {path.name!r} must start with a '-- summary' line")
        sql.append(text)
        summaries.append(first[3:].strip())
    return tuple(sql), tuple(summaries)


MIGRATIONS: Final[tuple[str, ...]]
"""The migrations' SQL, in order (index = version)."""
SUMMARIES: Final[tuple[str, ...]]
"""One line per version, saying what it adds."""
MIGRATIONS, SUMMARIES = _load()
