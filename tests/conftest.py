"""Shared fixtures: one real PostgreSQL per test session (embedded, or ``DATABASE_URL``)."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator

import graph._env  # noqa: F401  - strict msgpack and no telemetry before langgraph loads
import pytest

from graph.db import Database, embedded_url, open_database
from graph.settings import Settings


@pytest.fixture(scope="session")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real PostgreSQL server: ``DATABASE_URL`` if set, else an embedded one for this session."""
    external = os.environ.get("DATABASE_URL")
    if external:
        yield external
        return
    data_dir = tmp_path_factory.mktemp("postgres")
    yield embedded_url(data_dir, delete_on_exit=True)


@pytest.fixture(scope="session")
def settings(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings pointing at the session database, with a random approval secret."""
    return Settings(
        database_url=database_url,
        data_dir=tmp_path_factory.mktemp("data"),
        approval_secret=secrets.token_hex(32),
        default_timezone="Europe/Paris",
    )


@pytest.fixture(scope="session")
async def db(settings: Settings) -> AsyncIterator[Database]:
    """The migrated database, shared by the whole session."""
    async with open_database(settings) as database:
        yield database


@pytest.fixture
def owner() -> str:
    """A fresh owner id, so tests never see each other's rows."""
    return "o_" + secrets.token_hex(6)
