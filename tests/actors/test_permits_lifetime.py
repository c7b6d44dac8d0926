"""Warm permits leave nothing behind once closed: nothing keeps them alive (an exit hook
registered per object did, until the process ended).

Pure: a ``WarmPermits`` that never took a lease touches its semaphore only on ``close``
(to give back idle leases, of which it has none), so a stand-in semaphore is enough and
no Ray is started. Counted from outside: the objects of the type ``gc`` still tracks, and
weak references to each, which die only when nothing (no exit hook) refers to it.
"""

from __future__ import annotations

import gc
import weakref

from actors import WarmPermits

N = 500


class _NoSemaphore:
    """Stands for a ``ClusterSemaphore``; any call on it would be a bug in this test."""

    scope = "lifetime-test"


def _live_permits() -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if isinstance(obj, WarmPermits))


def test_closed_permits_are_freed():
    live = _live_permits()
    refs = []
    for _ in range(N):
        permits = WarmPermits(_NoSemaphore())
        permits.close()
        refs.append(weakref.ref(permits))
    del permits
    # Before: each object's exit hook (a bound method) held it until the process ended: 500 alive.
    assert _live_permits() - live == 0
    assert sum(ref() is not None for ref in refs) == 0


def test_permits_dropped_without_close_are_freed_too():
    live = _live_permits()
    kept = [WarmPermits(_NoSemaphore()) for _ in range(N)]
    assert _live_permits() - live == N
    refs = [weakref.ref(permits) for permits in kept]
    del kept
    assert _live_permits() - live == 0
    assert sum(ref() is not None for ref in refs) == 0
