"""Garbage collection in a process that runs turns: start-up objects frozen, young objects left to die young.

Two costs of CPython's collector grow with the turns in flight, and both are cut once per process
by :func:`tune_collector`:

* After start-up a Tollgate process holds over 200,000 objects (modules, pydantic schemas, the
  compiled graph, the registry) that live as long as the process. A full collection rescans every
  one of them. :func:`gc.freeze` moves what exists at that point out of the collector's reach for
  good, so full collections only scan what turns allocate.
* A turn's objects live as long as it waits on its model: seconds. With CPython's thresholds
  (a young collection every 700 allocations, a middle one every 10 of those), a busy server
  collects dozens of times during each turn, so every turn in flight has its objects promoted to
  the oldest generation, and full collections, which scan all of them, come often and last
  long. Collecting the young generation every 10,000 allocations and the middle one every 20 of
  those lets a turn's objects die before they are promoted (measured in ``bench/README.md``).
  Garbage without cycles is still freed at once, by reference counting; cyclic garbage waits at
  most one young collection longer.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["THRESHOLDS", "tune_collector"]

THRESHOLDS: Final = (10_000, 20, 10)
"""``gc.set_threshold``'s three numbers for a process that runs turns (CPython's: 700, 10, 10)."""

_tuned = False


def tune_collector() -> bool:
    """Once per process: collect, freeze every object alive now, and set :data:`THRESHOLDS`;
    whether this call did it (later calls do nothing)."""
    global _tuned
    if _tuned:
        return False
    _tuned = True
    gc.collect()  # cyclic garbage of start-up is freed first, not frozen with the rest
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    return True
