"""A process that opens an app tunes its collector once: start-up objects frozen (full
collections skip them), young collections rarer (a turn's objects die before they are promoted)."""

from __future__ import annotations

import gc

import tollgate.graph._env  # noqa: F401
from tollgate.graph.app import open_app
from tollgate.graph.process.gc_tuning import THRESHOLDS, tune_collector
from tollgate.graph.settings import Settings


async def test_opening_an_app_tunes_the_collector_once(settings: Settings) -> None:
    async with open_app(settings):
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # the modules, schemas and compiled graph of start-up
        assert gc.get_threshold() == THRESHOLDS
        assert THRESHOLDS[0] > 700 and THRESHOLDS[1] > 10  # rarer than CPython's own young and middle collections
    assert tune_collector() is False  # once per process: later apps freeze nothing more
    assert gc.get_freeze_count() <= frozen  # (frozen objects can still be freed by reference counting)
