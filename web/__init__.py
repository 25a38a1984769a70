"""Tollgate's HTTP surface: routes, dependencies, auth, streams and the static web page.

``server.py`` assembles these into the FastAPI app; nothing here does I/O at import.
:func:`web.auth.ensure_demo_token` and :func:`web.auth.issue_token` are what a CLI calls to
hand out bearer tokens.
"""

from __future__ import annotations

from tollgate.web.auth import ensure_demo_token, issue_token, revoke_token

__all__ = ["ensure_demo_token", "issue_token", "revoke_token"]
