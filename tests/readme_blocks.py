"""The README's code blocks that tests run as printed (marked ``<!-- tested: ... -->`` above them)."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["blocks_run_by"]

_README = Path(__file__).resolve().parent.parent / "README.md"
_BLOCK = re.compile(r"<!-- tested: (?P<where>[^>]*?) -->\n```(?P<lang>\w+)\n(?P<code>.*?)```", re.S)


def blocks_run_by(test_file: str, lang: str = "python") -> list[str]:
    """The ``lang`` blocks whose marker names ``test_file`` (``tests/test_readme.py``...), in order."""
    return [m["code"] for m in _BLOCK.finditer(_README.read_text(encoding="utf-8"))
            if test_file in m["where"] and m["lang"] == lang]
