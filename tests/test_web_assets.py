"""What the server gives a browser besides the API: vendored files (no CDN), ``/docs`` offline, error shapes."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.server_harness import Api, LiveServer

_ROOT = Path(__file__).resolve().parent.parent
_VENDOR = _ROOT / "web" / "static" / "vendor"


@pytest.mark.parametrize(
    ("path", "banner"),
    [
        (_VENDOR / "marked.umd.js", "marked v18.2.1"),
        (_VENDOR / "purify.min.js", "DOMPurify 3.5.0"),
        (_ROOT / "tests" / "assets" / "axe.min.js", "axe v4.14.1"),
    ],
)
def test_vendored_files_are_the_versions_the_readme_pins(path: Path, banner: str) -> None:
    assert banner in path.read_text(encoding="utf-8")[:400]
    pinned = (_VENDOR / "README.md").read_text()
    assert banner.split()[-1].lstrip("v") in pinned


def test_the_page_and_its_scripts_load_nothing_from_elsewhere() -> None:
    static = _ROOT / "web" / "static"
    for path in [static / "index.html", static / "app.js", static / "style.css"]:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(src|href)=\"https?://", text), path
        assert "cdn." not in text, path


async def test_docs_work_offline_from_vendored_swagger_ui(live_server: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=live_server.url) as client:
        page = await client.get("/docs")
        assert page.status_code == 200
        assert "/static/vendor/swagger-ui-bundle.js" in page.text
        assert "cdn" not in page.text  # FastAPI's default page loads Swagger UI from jsdelivr
        for asset in ("/static/vendor/swagger-ui-bundle.js", "/static/vendor/swagger-ui.css", "/openapi.json"):
            assert (await client.get(asset)).status_code == 200, asset
        assert (await client.get("/redoc")).status_code == 404  # ReDoc would need a CDN: not served


async def test_a_wrong_method_is_405_method_not_allowed(api: Api) -> None:
    response = await api.client.delete("/v1/approvals", headers=api.auth)
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"
    assert "allow" in response.headers


async def test_malformed_json_names_the_position_in_plain_words(api: Api) -> None:
    response = await api.client.post(
        "/v1/chat", headers={**api.auth, "Content-Type": "application/json"}, content=b'{"message": "hi",}'
    )
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "invalid_args"
    assert body["message"].startswith("the request body is not valid JSON (")
    assert "at character 18" in body["message"]
    assert "body.17" not in body["message"]
