"""The Ray actor that owns one scope's lease table.

Ray runs each concurrency group of an async actor on its own event loop thread, so the
table is guarded by a ``threading.Lock`` (never held across an ``await``) and parked calls
are woken with ``call_soon_threadsafe`` on their own loop. A daemon thread sweeps the table
so expiries and the end of recovery take effect even when no call arrives.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import ray

from cluster.connect import actor_was_restarted
from cluster.semaphore._lease_table import LeaseTable, Outcome

__all__ = ["SemaphoreActor"]

logger = logging.getLogger(__name__)
_LOG_EXTRA = {"component": "cluster-semaphore"}


def _settle(fut: asyncio.Future[Outcome], outcome: Outcome) -> None:
    if not fut.done():
        fut.set_result(outcome)


@ray.remote(concurrency_groups={"acquire": 10_000, "control": 64})
class SemaphoreActor:
    """Owns one scope's ``LeaseTable``. Parked acquires run in the ``acquire`` group, so
    release, renew and statistics (``control`` group) never queue behind them."""

    def __init__(self, scope: str, permits: int, ttl_s: float) -> None:
        restarted = actor_was_restarted()
        # Guards _table and _listeners; held only for short, non-awaiting sections.
        self._lock = threading.Lock()
        self._table = LeaseTable(scope, permits, ttl_s, now=time.monotonic(), recovering=restarted)
        # lease_id -> futures of the acquire calls parked on it (one per call, usually one).
        self._listeners: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[Outcome]]]] = {}
        self._sweep_interval = min(0.25, ttl_s / 10)
        threading.Thread(target=self._sweep_forever, name=f"sem-sweep:{scope}", daemon=True).start()
        if restarted:
            logger.warning(
                "semaphore %r: actor restarted; recovering for %.1fs (no new grants)",
                scope, ttl_s, extra=_LOG_EXTRA,
            )

    @ray.method(concurrency_group="acquire")
    async def acquire(self, lease_id: str, holder: str, limit: int, timeout: float | None) -> Outcome:
        """Park until granted; returns ``granted``, ``timeout`` or ``withdrawn``."""
        loop = asyncio.get_running_loop()
        with self._lock:
            outcome, decided = self._table.request(lease_id, holder, limit, time.monotonic())
            self._wake(decided)
            if outcome != "parked" or timeout == 0:
                if outcome == "parked":
                    outcome, decided = self._table.give_up(lease_id, time.monotonic())
                    self._wake(decided)
                return outcome
            fut: asyncio.Future[Outcome] = loop.create_future()
            self._listeners.setdefault(lease_id, []).append((loop, fut))
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            with self._lock:
                self._forget(lease_id, fut)
                outcome, decided = self._table.give_up(lease_id, time.monotonic())
                self._wake(decided)
            return outcome
        except asyncio.CancelledError:
            # The reply will never reach the caller: free whatever this request holds.
            with self._lock:
                self._forget(lease_id, fut)
                _, decided = self._table.release(lease_id, time.monotonic())
                self._wake(decided)
            raise

    @ray.method(concurrency_group="control")
    async def release(self, lease_id: str) -> bool:
        """Free a lease or withdraw a parked request; False if unknown (idempotent)."""
        with self._lock:
            released, decided = self._table.release(lease_id, time.monotonic())
            self._wake(decided)
        return released

    @ray.method(concurrency_group="control")
    async def renew(self, leases: list[tuple[str, str, int]]) -> list[bool]:
        """Extend leases by ``ttl_s``; False for each lease that is no longer held."""
        with self._lock:
            results, decided = self._table.renew(leases, time.monotonic())
            self._wake(decided)
        return results

    @ray.method(concurrency_group="control")
    async def statistics(self) -> dict[str, object]:
        """Report the table (the fields of ``SemaphoreStatistics``)."""
        with self._lock:
            self._wake(self._table.tick(time.monotonic()))
            return self._table.statistics()

    @ray.method(concurrency_group="control")
    async def reset_peak(self) -> None:
        """Restart ``max_held`` from the current ``held``."""
        with self._lock:
            self._table.reset_peak()

    @ray.method(concurrency_group="control")
    async def config(self) -> tuple[int, float]:
        """``(permits, ttl_s)`` this scope was created with."""
        return self._table.permits, self._table.ttl_s

    def _sweep_forever(self) -> None:
        while True:
            time.sleep(self._sweep_interval)
            with self._lock:
                self._wake(self._table.tick(time.monotonic()))

    def _wake(self, decided: list[tuple[str, Outcome]]) -> None:
        """Resolve the parked calls of decided requests (caller holds the lock)."""
        for lease_id, outcome in decided:
            for loop, fut in self._listeners.pop(lease_id, []):
                try:
                    loop.call_soon_threadsafe(_settle, fut, outcome)
                except RuntimeError:
                    # The loop is closed: the actor is shutting down and the call is gone.
                    logger.warning(
                        "semaphore %r: cannot wake request %s (%s): its event loop is closed",
                        self._table.scope, lease_id, outcome, exc_info=True, extra=_LOG_EXTRA,
                    )

    def _forget(self, lease_id: str, fut: asyncio.Future[Outcome]) -> None:
        remaining = [(lp, f) for lp, f in self._listeners.get(lease_id, []) if f is not fut]
        if remaining:
            self._listeners[lease_id] = remaining
        else:
            self._listeners.pop(lease_id, None)
