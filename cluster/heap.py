"""Keeping a long-lived actor process's start-up objects out of the garbage collector's way.

An actor process of soloist (a run host, a dedicated orchestrator, a semaphore service, a
subagent replica) holds about 100,000 objects before it serves its first call: modules,
classes, Ray's and pydantic's tables. CPython's full collection walks every one of them
each time it runs, and on this kind of machine that is a pause of 50 to 800 ms in the middle
of whatever call the process is serving. None of those objects ever becomes garbage, so the
process moves them to the collector's permanent generation once (``gc.freeze``): a full
collection then walks only what the process made since.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_startup_objects"]


def freeze_startup_objects() -> None:
    """Exclude every object alive now from later collections (reference counting still frees
    them when they are released). Call it once, at the end of an actor's ``__init__``; never
    where the objects alive are a caller's (a driver's) to manage."""
    gc.freeze()
