"""Data fencing: untrusted text reaches a model only inside a fence it cannot close.

Each fence carries a fresh random nonce; the data is JSON-encoded inside it. Text planted in
a mail body or an event title cannot forge the closing line because it cannot know the
nonce, and the surrounding instructions tell the model that everything inside is data.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any, Final

__all__ = ["fence", "new_nonce", "read_fence"]

_FENCE: Final = re.compile(r"<data kind=([a-z_]+) nonce=([0-9a-f]{16,64})>\n(.*?)\n</data nonce=\2>", re.S)


def new_nonce() -> str:
    """A fresh fence nonce (128 bits)."""
    return secrets.token_hex(16)


def fence(kind: str, data: Any, nonce: str) -> str:
    """Wrap JSON-encodable ``data`` in a fence labelled ``kind``."""
    if not re.fullmatch(r"[a-z_]+", kind):
        raise ValueError(f"fence kind {kind!r} must be lowercase letters and underscores")
    body = json.dumps(data, ensure_ascii=False, sort_keys=True)
    if nonce in body:  # pragma: no cover - 128 random bits; refuse rather than trust luck
        raise ValueError("fence nonce collides with its data")
    return f"<data kind={kind} nonce={nonce}>\n{body}\n</data nonce={nonce}>"


def read_fence(text: str, kind: str) -> Any | None:
    """The data of the first fence labelled ``kind`` in ``text``, or ``None``."""
    for match in _FENCE.finditer(text):
        if match.group(1) == kind:
            try:
                return json.loads(match.group(3))
            except json.JSONDecodeError:
                return None
    return None
