"""Warm permits: this process's leases on one semaphore scope, reused between handoffs.

Taking a permit from the cluster-wide semaphore costs a round trip to its actor, and so
does giving it back: two of the three round trips of a no-op handoff. A handoff that ends
well hands its lease to this cache instead; the next handoff of this process (the next item
of a parallel batch, or the next sequential handoff) takes it back at no cost. A lease
left idle for ``linger`` seconds is released by a reaper thread.

Why the cap still holds: in-flight handoffs never exceed the leases this process holds, and
the semaphore bounds held leases cluster-wide; caching changes how long a lease lives, not
how many exist. A lease is reused only under the cap it was granted for, so lowering
``set_max_parallel`` takes effect at once. Failed or cancelled handoffs release their lease
immediately. Idle leases are still renewed by the semaphore's heartbeat; a process that
dies loses them after the semaphore's TTL, like any other lease.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time

from cluster.process import Table, process_registry
from cluster.semaphore import ClusterSemaphore, Lease

__all__ = ["WarmPermits", "DEFAULT_LINGER_S", "permits_for", "release_idle_permits"]

_log = logging.getLogger(__name__)

#: How long an idle lease waits for reuse before it is released. Short: other processes
#: waiting on the same scope are delayed by at most this much.
DEFAULT_LINGER_S = 0.025


class WarmPermits:
    """Leases of one scope held by this process, idle ones kept for ``linger`` seconds."""

    def __init__(self, semaphore: ClusterSemaphore, *, linger: float = DEFAULT_LINGER_S) -> None:
        self._semaphore = semaphore
        self._linger = linger
        self._lock = threading.Lock()
        # Idle leases, most recently returned last, with the time they went idle. Only
        # touched under _lock (handoffs may run on several threads' event loops).
        self._idle: list[tuple[Lease, float]] = []
        self._reaper: threading.Thread | None = None
        self._reused = 0
        # A driver that exits gives its idle leases back at once instead of letting them
        # expire after the semaphore's TTL (other processes of the scope would wait that long).
        atexit.register(self._release_at_exit)

    @property
    def reused(self) -> int:
        """How many handoffs took a warm lease instead of asking the semaphore."""
        return self._reused

    async def take(self, limit: int) -> Lease:
        """A lease for a cap of ``limit``: a warm one if this process has it, else a new one."""
        stale: list[Lease] = []
        warm: Lease | None = None
        with self._lock:
            while self._idle and warm is None:
                lease, _ = self._idle.pop()
                if lease.limit == limit:
                    warm = lease
                else:
                    stale.append(lease)  # granted under another cap: give it back
            if warm is not None:
                self._reused += 1
        for lease in stale:
            self._semaphore.release_nowait(lease)
        if warm is not None:
            return warm
        return await self._semaphore.acquire(limit=limit)

    def give_back(self, lease: Lease, *, reuse: bool) -> None:
        """End of a handoff: keep ``lease`` warm (``reuse``) or release it now."""
        if not reuse:
            self._semaphore.release_nowait(lease)
            return
        with self._lock:
            self._idle.append((lease, time.monotonic()))
            if self._reaper is None:
                self._reaper = threading.Thread(target=self._reap_forever, name="soloist-warm-permits", daemon=True)
                self._reaper.start()

    def release_idle(self) -> int:
        """Release every idle lease now; returns how many."""
        with self._lock:
            idle, self._idle = self._idle, []
        for lease, _ in idle:
            self._semaphore.release_nowait(lease)
        return len(idle)

    def _release_at_exit(self) -> None:
        try:
            self.release_idle()
        except Exception as exc:  # Ray already gone: the leases expire after the TTL instead
            _log.debug("could not release idle leases at exit: %s", exc, extra={"component": "warm-permits"})

    def _reap_forever(self) -> None:
        while True:
            time.sleep(self._linger / 2)
            cutoff = time.monotonic() - self._linger
            with self._lock:
                expired = [lease for lease, since in self._idle if since <= cutoff]
                self._idle = [(lease, since) for lease, since in self._idle if since > cutoff]
            for lease in expired:
                self._semaphore.release_nowait(lease)


# This process's warm permits, per (Ray session, scope).
_PERMITS: Table[str, WarmPermits] = process_registry().table("handoffs.warm_permits", per_session=True)


def permits_for(scope: str) -> WarmPermits:
    """This process's warm permits on ``scope`` (per Ray session: old handles are useless)."""
    return _PERMITS.get_or_create(scope, lambda: WarmPermits(ClusterSemaphore(scope)))


def release_idle_permits(scope: str) -> int:
    """Give back this process's idle leases on ``scope`` now (an orchestrator closing)."""
    return sum(p.release_idle() for p in _PERMITS.select(lambda s: s == scope))
