"""Warm permits leave nothing behind once closed: no exit hook, no live object.

Pure: a ``WarmPermits`` that never took a lease touches its semaphore only on ``close``
(to give back idle leases, of which it has none), so a stand-in semaphore is enough and
no Ray is started. Counted from outside: ``atexit``'s callback count and the objects of
the type ``gc`` still tracks.
"""

from __future__ import annotations

import atexit
import gc

from actors import WarmPermits

N = 500


class _NoSemaphore:
    """Stands for a ``ClusterSemaphore``; any call on it would be a bug in this test."""

    scope = "lifetime-test"


def _live_permits() -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if isinstance(obj, WarmPermits))


def test_closed_permits_register_nothing_and_are_freed():
    callbacks, live = atexit._ncallbacks(), _live_permits()
    for _ in range(N):
        WarmPermits(_NoSemaphore()).close()
    # Before: one atexit callback per object, each holding its object (500 more of each).
    assert atexit._ncallbacks() - callbacks <= 1
    assert _live_permits() - live == 0


def test_permits_dropped_without_close_are_freed_too():
    callbacks, live = atexit._ncallbacks(), _live_permits()
    kept = [WarmPermits(_NoSemaphore()) for _ in range(N)]
    assert _live_permits() - live == N
    del kept
    assert atexit._ncallbacks() - callbacks <= 1
    assert _live_permits() - live == 0
