"""Keeping a long-lived actor process's heap small: its start-up objects out of the garbage
collector's way, and what it freed given back to the OS.

An actor process of soloist (a run host, a dedicated orchestrator, a semaphore service, a
subagent replica) holds about 100,000 objects before it serves its first call: modules,
classes, Ray's and pydantic's tables. CPython's full collection walks every one of them
each time it runs, and on this kind of machine that is a pause of 50 to 800 ms in the middle
of whatever call the process is serving. None of those objects ever becomes garbage, so the
process moves them to the collector's permanent generation once (``gc.freeze``): a full
collection then walks only what the process made since.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc

__all__ = ["freeze_startup_objects", "give_back_freed_memory"]

_LIBC_NAME = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_LIBC_NAME) if _LIBC_NAME and hasattr(ctypes.CDLL(_LIBC_NAME), "malloc_trim") else None


def freeze_startup_objects() -> None:
    """Exclude every object alive now from later collections (reference counting still frees
    them when they are released). Call it once, at the end of an actor's ``__init__``; never
    where the objects alive are a caller's (a driver's) to manage."""
    gc.freeze()


def give_back_freed_memory() -> None:
    """Collect garbage, then ask the C allocator to return its free memory to the OS (glibc's
    ``malloc_trim``; nothing more where there is none). A process that just let go of many
    objects (a host unloading runs, a replica forgetting scopes) otherwise keeps their pages
    resident until some later allocation reuses them. A full collection of a large heap costs
    a good part of a second: call it after a burst, not per object."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
