"""Store ids: short, prefixed, random (never derived from content a sender controls)."""

from __future__ import annotations

import secrets

__all__ = ["new_id"]

_ALPHABET = "abcdefghijkmnopqrstuvwxyz23456789"


def new_id(prefix: str) -> str:
    """A new id such as ``evt_k3m9q2x7ab`` (10 random characters, about 50 bits)."""
    return prefix + "_" + "".join(secrets.choice(_ALPHABET) for _ in range(10))
