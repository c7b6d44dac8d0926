"""Warm permits: one process's leases on one semaphore scope, reused between handoffs.

They live in the subagent replica that runs skill bodies (see ``actors.handoffs.replica``): the
replica takes a permit before a body starts and gives it back only once the body has really
returned. A lease given back is kept idle for ``linger`` seconds, and the next body this
replica starts takes it at no cost (no round trip to the semaphore service).

Why reuse never breaks the cap or fairness:
  - fencing: an idle lease is reused only while ``ClusterSemaphore.holds`` says the
    semaphore surely still holds it under the same generation; a lease a renewal reported
    lost is never reused, and a lease granted under another cap is released instead.
  - fairness: a watch thread follows the semaphore's "someone is waiting" signal; while any
    request waits, idle leases are released at once and nothing is reused, so every permit
    goes through the semaphore's FIFO queue. A waiter can be overtaken only by reuses that
    start within one message latency of its arrival, never for longer.
  - in-flight bodies never exceed the leases this process holds, and the semaphore bounds
    held leases cluster-wide: caching changes how long a lease lives, not how many exist.
  - budgets: on a scope with a budget every grant is charged, so a lease is never kept
    warm there: each body's lease goes back at once, settled with the usage the body reported.

A scope this process has not used for ``linger`` (nothing taken, held or idle) goes quiet:
its two threads end (a replica serving thousands of runs' scopes keeps threads only for the
scopes in use) and it counts as contended, so nothing is reused until the watch, started
again by the next take, has heard that nobody waits. A scope quiet for ``FORGET_AFTER_S`` is
forgotten altogether (``retire_if_unused``): a replica that served a hundred thousand runs,
each with a scope of its own, keeps nothing for the runs that now wait for a person; the
next take on such a scope joins it again (one round trip).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from concurrent.futures import CancelledError as CancelledFuture
from typing import Any

import ray

from cluster.process import Table, process_registry
from cluster.semaphore import ClusterSemaphore, Lease

__all__ = [
    "WarmPermits", "DEFAULT_LINGER_S", "FORGET_AFTER_S", "permits_for", "joined_permits", "drop_permits",
    "forget_unused_permits", "release_idle_permits", "close_all_permits",
]

_log = logging.getLogger(__name__)
_LOG_EXTRA = {"component": "warm-permits"}

#: How long an idle lease waits for reuse before it is released (when nobody waits).
#: Long enough to span the pause between two turns of a run loop, whose next handoff goes
#: to the same replica (see ``SubagentPool.pick``): keeping a lease nobody else asks for
#: costs nobody anything, because the watch thread gives it back as soon as a request
#: from anywhere waits (one message latency).
DEFAULT_LINGER_S = 0.5

#: How long a quiet scope's permits are kept before they are forgotten (see the docstring):
#: a run whose next handoff comes later pays one round trip to join its scope again.
FORGET_AFTER_S = 10.0


class WarmPermits:
    """Leases of one scope held by this process, idle ones kept for ``linger`` seconds.

    ``owner`` is the handle of the actor this runs in, when that actor runs the work the
    permits admit (its leases are then guarded: see ``ClusterSemaphore.acquire``).
    """

    def __init__(self, semaphore: ClusterSemaphore, *, owner: Any = None, linger: float = DEFAULT_LINGER_S) -> None:
        self._semaphore = semaphore
        self._owner = owner
        self._linger = linger
        self._lock = threading.Lock()
        # Idle leases, most recently returned last, with the time they went idle. Only
        # touched under _lock (bodies finish on several threads' event loops).
        self._idle: list[tuple[Lease, float]] = []
        # True while the semaphore reports a waiting request: no reuse, no idling.
        self._contended = False
        self._reaper: threading.Thread | None = None
        self._watcher: threading.Thread | None = None
        self._watch_generation = 0  # a watcher thread ends once this moved past its own
        self._out = 0  # takes in progress and leases taken but not given back
        self._last_used = time.monotonic()
        self._closed = threading.Event()
        # The watch thread's pending long poll, cancelled by ``close``: a process with a call of
        # its own still pending cannot exit (a replica retiring would hang in its exit).
        self._watch_pending: Any = None
        self._reused = 0
        # A process that exits gives its idle leases back at once instead of letting them
        # expire after the semaphore's TTL (other processes of the scope would wait that long):
        # one hook for the whole process walks the open permits, held weakly, so a closed or
        # dropped object is freed (a hook per object kept every one alive until exit).
        _OPEN.add(self)

    @property
    def reused(self) -> int:
        """How many takes got a warm lease instead of asking the semaphore."""
        return self._reused

    @property
    def semaphore(self) -> ClusterSemaphore:
        return self._semaphore

    @property
    def closed(self) -> bool:
        """True once ``close`` ran (its scope went away): look the scope's permits up again."""
        return self._closed.is_set()

    async def take(self, limit: int) -> Lease:
        """A lease for a cap of ``limit``: a warm one if this process has a valid one and
        nobody waits, else a new one from the semaphore (in its FIFO order)."""
        with self._lock:
            self._out += 1
            self._last_used = time.monotonic()
        try:
            return await self._take(limit)
        except BaseException:
            with self._lock:
                self._out -= 1
            raise

    async def _take(self, limit: int) -> Lease:
        self._start_watch()
        self._start_reaper()
        stale: list[Lease] = []
        warm: Lease | None = None
        with self._lock:
            while self._idle and warm is None and not self._contended:
                lease, _ = self._idle.pop()
                if lease.limit == limit and self._semaphore.holds(lease):
                    warm = lease
                else:
                    stale.append(lease)  # another cap, or no longer surely ours: give it back
            if warm is not None:
                self._reused += 1
        for lease in stale:
            self._release(lease)
        if warm is not None:
            return warm
        return await self._semaphore.acquire(limit=limit, owner=self._owner)

    def give_back(self, lease: Lease, *, reuse: bool, used_tokens: int | None = None) -> None:
        """The work ``lease`` admitted has returned: keep it warm (``reuse``) or release it.
        ``used_tokens``: what the work's model calls reported (settles a budget's charge; a
        lease of a budgeted scope is never kept warm)."""
        with self._lock:
            self._out -= 1
            self._last_used = time.monotonic()
            keep = (reuse and self._semaphore.budget is None and not self._contended
                    and not self._closed.is_set())
            if keep:
                self._idle.append((lease, time.monotonic()))
        if keep:
            self._start_reaper()
        else:
            self._release(lease, used_tokens)

    def release_idle(self) -> int:
        """Release every idle lease now; returns how many."""
        with self._lock:
            idle, self._idle = self._idle, []
        for lease, _ in idle:
            self._release(lease)
        return len(idle)

    def retire_if_unused(self, idle_for: float) -> bool:
        """Close these permits if nothing was taken, held or kept idle for ``idle_for``
        seconds and their threads have ended; True if closed (the caller forgets them)."""
        with self._lock:
            unused = (not self._idle and not self._out and self._watcher is None and self._reaper is None
                      and self._last_used <= time.monotonic() - idle_for)
            if unused:
                self._closed.set()
        if unused:
            _OPEN.discard(self)
        return unused

    def close(self) -> None:
        """Release idle leases, stop keeping any and stop watching (the scope is going away,
        or the process is ending)."""
        self._closed.set()
        _OPEN.discard(self)
        self.release_idle()
        with self._lock:
            pending, self._watch_pending = self._watch_pending, None
        if pending is not None:
            _cancel_watch(pending)

    def _release(self, lease: Lease, used_tokens: int | None = None) -> None:
        try:
            self._semaphore.release_nowait(lease, used_tokens=used_tokens)
        except Exception as exc:  # the actor is gone: the lease went with it
            _log.info("could not release lease %s: %s", lease.lease_id, exc, extra=_LOG_EXTRA)

    def _release_at_exit(self) -> None:
        try:
            self.release_idle()
        except Exception as exc:  # Ray already gone: the leases expire after the TTL instead
            _log.debug("could not release idle leases at exit: %s", exc, extra=_LOG_EXTRA)

    def _start_watch(self) -> None:
        if self._watcher is not None:
            return
        with self._lock:
            if self._watcher is None:
                self._watch_generation += 1
                # Asked first with what the permits believe now: after a quiet spell (contended
                # until heard), the first answer comes at once.
                self._watcher = threading.Thread(target=self._watch_forever, args=(self._watch_generation, self._contended),
                                                 name="soloist-permit-watch", daemon=True)
                self._watcher.start()

    def _start_reaper(self) -> None:
        if self._reaper is not None:
            return
        with self._lock:
            if self._reaper is None:
                self._reaper = threading.Thread(target=self._reap_forever, name="soloist-warm-permits", daemon=True)
                self._reaper.start()

    def _watching(self, generation: int) -> bool:
        return not self._closed.is_set() and self._watch_generation == generation

    def _watch_forever(self, generation: int, contended: bool) -> None:
        while self._watching(generation):
            try:
                # A future, not ray.get: this thread runs in an async actor (a replica), where
                # ray.get prints Ray's "blocking ray.get inside async actor" on the console.
                ref = self._semaphore.watch_ref(contended)
                with self._lock:
                    stopped = not self._watching(generation)
                    if not stopped:
                        self._watch_pending = ref
                if stopped:
                    # Closed (or gone quiet) while this poll was being sent: nobody saw it
                    # pending, so cancel it here (left parked, it would hold up a retiring
                    # replica's exit).
                    _cancel_watch(ref)
                    return
                contended = bool(ref.future().result())
                with self._lock:
                    if self._watch_generation != generation:
                        return  # went quiet meanwhile: a newer watch decides
                    self._watch_pending = None
            except (ray.exceptions.RayError, CancelledFuture) as exc:
                if not self._watching(generation):
                    return  # closed or quiet while watching: its poll was cancelled
                _log.info("semaphore %s: stopped watching for waiters: %s", self._semaphore.scope, exc, extra=_LOG_EXTRA)
                with self._lock:
                    self._contended = True  # no reuse against a semaphore we cannot hear
                self.release_idle()
                return
            with self._lock:
                if self._watch_generation != generation:
                    return
                self._contended = contended
            if contended:
                self.release_idle()

    def _reap_forever(self) -> None:
        while not self._closed.is_set():
            time.sleep(self._linger / 2)
            now = time.monotonic()
            cutoff = now - self._linger
            pending = None
            with self._lock:
                expired = [lease for lease, since in self._idle if since <= cutoff]
                self._idle = [(lease, since) for lease, since in self._idle if since > cutoff]
                quiet = not self._idle and not self._out and self._last_used <= cutoff
                if quiet:
                    # Unheard from now on: nothing is reused until a new watch hears again.
                    self._contended = True
                    self._watch_generation += 1
                    self._watcher = self._reaper = None
                    pending, self._watch_pending = self._watch_pending, None
            for lease in expired:
                self._release(lease)
            if quiet:
                if pending is not None:
                    _cancel_watch(pending)
                return


# Permits not closed yet, held weakly: what the exit hook gives back. Never keeps one alive.
_OPEN: weakref.WeakSet[WarmPermits] = weakref.WeakSet()


def _release_all_at_exit() -> None:
    for permits in list(_OPEN):
        permits._release_at_exit()


atexit.register(_release_all_at_exit)


def _cancel_watch(ref: Any) -> None:
    """End a pending semaphore watch: a process with a call of its own pending cannot exit."""
    try:
        ray.cancel(ref)
    except Exception as exc:  # already answered, or Ray is gone: nothing is left pending
        _log.debug("could not cancel the semaphore watch: %s", exc, extra=_LOG_EXTRA)


# This process's warm permits, per (Ray session, scope). In a subagent replica they are
# the replica's guarded leases; a driver process never holds any (it holds no permit).
_PERMITS: Table[str, WarmPermits] = process_registry().warm_permits


def permits_for(scope: str, owner: Any = None) -> WarmPermits:
    """This process's warm permits on ``scope``, joined to the scope's live semaphore table.

    ``owner``: the handle of the actor running the admitted work (its leases are guarded).
    Raises ``SemaphoreUnavailable`` when no service holds ``scope`` (every run using it was
    closed): a replica never creates a scope, only a run does.
    """
    permits = _PERMITS.get(scope)
    if permits is not None:
        return permits
    # Built outside the table's lock: joining the scope is a round trip and touches the
    # semaphore's own heartbeat table (see ``cluster.process`` on lock discipline).
    fresh = WarmPermits(ClusterSemaphore.existing(scope), owner=owner)
    return _PERMITS.get_or_create(scope, lambda: fresh)


async def joined_permits(scope: str, owner: Any = None) -> WarmPermits:
    """``permits_for`` for an event loop (a replica's): joins the scope's live table without
    blocking the loop and without ``ray.get`` (which, in an async actor, blocks its loop and
    prints Ray's warning on the driver's console). Raises ``SemaphoreUnavailable`` likewise."""
    permits = _PERMITS.get(scope)
    if permits is not None:
        return permits
    fresh = WarmPermits(await ClusterSemaphore.existing_async(scope), owner=owner)
    return _PERMITS.get_or_create(scope, lambda: fresh)


def drop_permits(scope: str, permits: WarmPermits) -> None:
    """Forget ``permits`` (its scope's actor retired or was re-created) and close it."""
    _PERMITS.discard(scope, permits)
    permits.close()


def forget_unused_permits(permits: dict[str, WarmPermits], idle_for: float = FORGET_AFTER_S) -> int:
    """Close and forget, from this process's table and from ``permits`` (a replica's own
    map), the permits of every scope unused for ``idle_for`` seconds; how many."""
    forgotten = 0
    for scope, held in list(permits.items()):  # a call on another loop may add one meanwhile
        if held.closed or held.retire_if_unused(idle_for):
            if permits.get(scope) is held:
                del permits[scope]
            _PERMITS.discard(scope, held)
            forgotten += 1
    return forgotten


def release_idle_permits(scope: str) -> int:
    """Give back this process's idle leases on ``scope`` now (its run is closing)."""
    return sum(p.release_idle() for p in _PERMITS.select(lambda s: s == scope))


def close_all_permits() -> None:
    """Give back every idle lease this process keeps, on every scope, and stop watching the
    semaphores (a replica retiring: nothing of its own may stay pending, or it cannot exit)."""
    for permits in _PERMITS.select(lambda _scope: True):
        drop_permits(permits.semaphore.scope, permits)
