"""Garbage collection in a process that runs turns: start-up objects are frozen once.

After start-up a Tollgate process holds over 200,000 objects (modules, pydantic schemas, the
compiled graph, the registry) that live as long as the process. CPython's full collection
rescans every one of them: about 100 ms on a 2-core machine, every few hundred turns, a stall
for every turn in flight. :func:`gc.freeze` moves what exists at that point out of the
collector's reach for good, so full collections only scan what turns allocate.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_startup_objects"]

_frozen = False


def freeze_startup_objects() -> bool:
    """Collect once, then freeze every object alive now (once per process); whether this call froze."""
    global _frozen
    if _frozen:
        return False
    _frozen = True
    gc.collect()  # cyclic garbage of start-up is freed first, not frozen with the rest
    gc.freeze()
    return True
