"""The web page at ``/``: static HTML, JS and CSS, no build step (not part of the API schema)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from fastapi import APIRouter
from fastapi.responses import FileResponse

__all__ = ["STATIC_DIR", "router"]

STATIC_DIR: Final = Path(__file__).resolve().parent / "static"
"""Where the page's files live (served under ``/static``)."""

# The page keeps a bearer token: allow only our own scripts (no inline code), never send a
# Referer, and refuse to be framed. (The demo link carries the token in the fragment, which
# browsers never send.)
_PAGE_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}

router = APIRouter(include_in_schema=False)


@router.get("/")
async def page() -> FileResponse:
    """The chat and approvals page."""
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers=_PAGE_HEADERS)
