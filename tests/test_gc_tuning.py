"""A process that opens an app freezes its start-up objects once (full collections skip them)."""

from __future__ import annotations

import gc

import tollgate.graph._env  # noqa: F401
from tollgate.graph.app import open_app
from tollgate.graph.process.gc_tuning import freeze_startup_objects
from tollgate.graph.settings import Settings


async def test_opening_an_app_freezes_start_up_objects_once(settings: Settings) -> None:
    async with open_app(settings):
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # the modules, schemas and compiled graph of start-up
    assert freeze_startup_objects() is False  # once per process: later apps freeze nothing more
    assert gc.get_freeze_count() <= frozen  # (frozen objects can still be freed by reference counting)
