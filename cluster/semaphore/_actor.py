"""The Ray actor that owns one scope's lease table.

Ray runs each concurrency group of an async actor on its own event loop thread, so the
table is guarded by a ``threading.Lock`` (never held across an ``await``) and parked calls
are woken with ``call_soon_threadsafe`` on their own loop. A daemon thread sweeps the table
so expiries and the end of recovery take effect even when no call arrives; it also probes
the holders of guarded leases that missed their renewals (through Ray: an answer, or Ray's
verdict that the holder died) and watches the runs attached to the scope. A requester that
saw its subagent lost reports it (``suspect``), and the sweep probes that holder at once
instead of a TTL later; the report itself frees nothing.

Lifecycle of the actor: ``serving`` while runs use the scope; ``retired`` once the last
attached run detached or died: it grants nothing more and ends itself as soon as no lease
is held (the work those leases admit may still run; a new actor for the scope must not
start beside it).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Literal

import ray
from ray.exceptions import ActorUnavailableError, RayActorError

from cluster.connect import actor_was_restarted
from cluster.semaphore._lease_table import LeaseTable, Outcome

__all__ = ["SemaphoreActor", "Detached"]

logger = logging.getLogger(__name__)
_LOG_EXTRA = {"component": "cluster-semaphore"}

Detached = Literal["in-use", "retiring", "retired"]
"""What ``detach_run`` did: others still use the scope; the last run left but leases are
still held (the actor ends itself once they are released); the last run left, none held."""


def _settle(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


@ray.remote(concurrency_groups={"acquire": 10_000, "control": 64, "watch": 10_000})
class SemaphoreActor:
    """Owns one scope's ``LeaseTable``. Parked acquires run in the ``acquire`` group and
    contention watches in ``watch``, so release, renew and statistics (``control``) never
    queue behind them."""

    def __init__(self, scope: str, permits: int, ttl_s: float) -> None:
        restarted = actor_was_restarted()
        # Guards every field below; held only for short, non-awaiting sections.
        self._lock = threading.Lock()
        self._table = LeaseTable(scope, permits, ttl_s, now=time.monotonic(), recovering=restarted)
        # lease_id -> futures of the acquire calls parked on it (one per call, usually one).
        self._listeners: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[Outcome]]]] = {}
        # holder -> the actor that holds its guarded leases (asked when they miss renewals).
        self._owners: dict[str, Any] = {}
        # Probes out: ref -> (holder, lease ids asked about, when it was sent).
        self._probes: dict[Any, tuple[str, list[str], float]] = {}
        # Contention watches parked until "anyone waiting" changes from what they saw.
        self._watchers: list[tuple[bool, asyncio.AbstractEventLoop, asyncio.Future[bool]]] = []
        # Runs using the scope: run name -> its orchestrator actor (pinged to notice its death).
        # Unknown after a restart of this actor: then it never retires on its own.
        self._runs: dict[str, Any] = {}
        self._runs_known = not restarted
        self._retired = False
        # Set by ``suspect``: the sweep wakes at once to send the probes it made due.
        self._kick = threading.Event()
        self._sweep_interval = min(0.25, ttl_s / 10)
        self._run_check_every = max(1.0, ttl_s / 2)
        threading.Thread(target=self._sweep_forever, name=f"sem-sweep:{scope}", daemon=True).start()
        if restarted:
            logger.warning(
                "semaphore %r: actor restarted; recovering for %.1fs (no new grants)",
                scope, ttl_s, extra=_LOG_EXTRA,
            )

    # ------------------------------------------------------------------ leases

    @ray.method(concurrency_group="acquire")
    async def acquire(
        self, lease_id: str, holder: str, limit: int, timeout: float | None, owner: Any = None
    ) -> tuple[Outcome, int]:
        """Park until granted; returns (``granted``/``timeout``/``withdrawn``, generation).

        ``owner``: the actor that will hold the lease and run the work it admits; the lease
        is then guarded (see ``LeaseTable``).
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._retired:
                return "withdrawn", 0
            if owner is not None:
                self._owners[holder] = owner
            outcome, decided = self._table.request(
                lease_id, holder, limit, time.monotonic(), guarded=owner is not None
            )
            self._wake(decided)
            if outcome != "parked" or timeout == 0:
                if outcome == "parked":
                    outcome, decided = self._table.give_up(lease_id, time.monotonic())
                    self._wake(decided)
                return outcome, self._table.generation_of(lease_id) or 0
            fut: asyncio.Future[Outcome] = loop.create_future()
            self._listeners.setdefault(lease_id, []).append((loop, fut))
        try:
            outcome = await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            with self._lock:
                self._forget(lease_id, fut)
                outcome, decided = self._table.give_up(lease_id, time.monotonic())
                self._wake(decided)
        except asyncio.CancelledError:
            # The reply will never reach the caller: free whatever this request holds.
            with self._lock:
                self._forget(lease_id, fut)
                _, decided = self._table.release(lease_id, time.monotonic())
                self._wake(decided)
            raise
        with self._lock:
            return outcome, self._table.generation_of(lease_id) or 0

    @ray.method(concurrency_group="control")
    async def release(self, lease_id: str) -> bool:
        """Free a lease or withdraw a parked request; False if unknown (idempotent)."""
        with self._lock:
            released, decided = self._table.release(lease_id, time.monotonic())
            self._wake(decided)
        return released

    @ray.method(concurrency_group="control")
    async def renew(self, leases: list[tuple[Any, ...]], owner: Any = None) -> list[bool]:
        """Extend leases by ``ttl_s``; False for each lease that is no longer held."""
        with self._lock:
            if owner is not None:
                for item in leases:
                    self._owners[item[1]] = owner
            results, decided = self._table.renew(leases, time.monotonic())
            self._wake(decided)
        return results

    @ray.method(concurrency_group="control")
    async def suspect(self, owner: Any) -> int:
        """A requester's call to ``owner`` (an actor holding guarded leases) failed: probe its
        leases now rather than once they miss their renewals. The requester's word frees
        nothing: only the probe's answer (Ray's verdict that the process died, or a restarted
        process that does not hold them) does; an alive owner's answer renews them. Returns
        how many leases are being checked."""
        with self._lock:
            holders = [holder for holder, known in self._owners.items() if known == owner]
            suspects, decided = self._table.suspect(holders, time.monotonic())
            self._wake(decided)
        if suspects:
            logger.info(
                "semaphore %r: %d leases of a holder reported lost; asking Ray about it now",
                self._table.scope, suspects, extra=_LOG_EXTRA,
            )
            self._kick.set()
        return suspects

    @ray.method(concurrency_group="watch")
    async def watch(self, contended: bool) -> bool:
        """Whether requests are waiting; parks while that is still ``contended``."""
        loop = asyncio.get_running_loop()
        with self._lock:
            now_contended = self._table.waiting > 0
            if now_contended != contended:
                return now_contended
            fut: asyncio.Future[bool] = loop.create_future()
            self._watchers.append((contended, loop, fut))
        try:
            return await fut
        finally:
            with self._lock:
                self._watchers = [w for w in self._watchers if w[2] is not fut]

    @ray.method(concurrency_group="control")
    async def statistics(self) -> dict[str, object]:
        """Report the table (the fields of ``SemaphoreStatistics``)."""
        with self._lock:
            self._wake(self._table.tick(time.monotonic()))
            return {**self._table.statistics(), "runs": len(self._runs), "retired": self._retired}

    @ray.method(concurrency_group="control")
    async def reset_peak(self) -> None:
        """Restart ``max_held`` from the current ``held``."""
        with self._lock:
            self._table.reset_peak()

    @ray.method(concurrency_group="control")
    async def config(self) -> tuple[int, float]:
        """``(permits, ttl_s)`` this scope was created with."""
        return self._table.permits, self._table.ttl_s

    # -------------------------------------------------------------------- runs

    @ray.method(concurrency_group="control")
    async def attach_run(self, run: str, orchestrator: Any) -> bool:
        """Record that ``run`` uses the scope; False once retired (open a new actor)."""
        with self._lock:
            if self._retired:
                return False
            self._runs[run] = orchestrator
            return True

    @ray.method(concurrency_group="control")
    async def detach_run(self, run: str) -> Detached:
        """``run`` stopped using the scope (it was closed); see ``Detached``."""
        with self._lock:
            self._runs.pop(run, None)
            if self._runs or not self._runs_known:
                return "in-use"
            self._retire("its last run was closed")
            return "retired" if self._table.held == 0 else "retiring"

    # --------------------------------------------------------------- internals

    def _retire(self, why: str) -> None:
        """Grant nothing more (caller holds the lock); parked requests are withdrawn."""
        if self._retired:
            return
        self._retired = True
        logger.info("semaphore %r retired: %s", self._table.scope, why, extra=_LOG_EXTRA)
        decided: list[tuple[str, Outcome]] = []
        for lease_id in list(self._listeners):
            _, more = self._table.release(lease_id, time.monotonic())
            decided += more
        self._wake(decided)

    def _sweep_forever(self) -> None:
        next_run_check = time.monotonic() + self._run_check_every
        pings: dict[Any, str] = {}
        while True:
            self._pause()
            with self._lock:
                self._wake(self._table.tick(time.monotonic()))
                due = self._table.due_probes(time.monotonic())
                for holder, lease_ids in due.items():
                    owner = self._owners.get(holder)
                    if owner is None:  # no way to ask: the clock decides, as for plain leases
                        for lease_id in lease_ids:
                            self._wake(self._table.probe_answered(lease_id, False, time.monotonic()))
                        continue
                    self._probes[owner.holds_leases.remote(lease_ids)] = (holder, lease_ids, time.monotonic())
                retired_and_empty = self._retired and self._table.held == 0
            if retired_and_empty:
                self._end_self()
                return
            self._collect_probes()
            if time.monotonic() >= next_run_check:
                next_run_check = time.monotonic() + self._run_check_every
                pings = self._check_runs(pings)

    def _pause(self) -> None:
        """Until the next sweep: one interval, cut short by a probe's answer (while any is
        out) or by a ``suspect`` report (while none is)."""
        if self._probes:
            ray.wait(list(self._probes), num_returns=1, timeout=self._sweep_interval)
        else:
            self._kick.wait(self._sweep_interval)
        self._kick.clear()

    def _collect_probes(self) -> None:
        if not self._probes:
            return
        ready, _ = ray.wait(list(self._probes), num_returns=len(self._probes), timeout=0)
        for ref in ready:
            holder, lease_ids, sent = self._probes.pop(ref)
            answers: list[bool | None]
            try:
                answers = list(ray.get(ref))
            except ActorUnavailableError:
                answers = [None] * len(lease_ids)  # restarting or unreachable: ask again
                if time.monotonic() - sent >= self._sweep_interval:
                    # It took Ray a while to say so (a probe sent to the process that had just
                    # died): ask the restarted one at once, not an interval later.
                    self._kick.set()
            except RayActorError:
                answers = [False] * len(lease_ids)  # Ray's verdict: the holder died
            with self._lock:
                for lease_id, alive in zip(lease_ids, answers):
                    self._wake(self._table.probe_answered(lease_id, alive, time.monotonic()))
                if answers and all(a is False for a in answers):
                    self._owners.pop(holder, None)

    def _check_runs(self, pings: dict[Any, str]) -> dict[Any, str]:
        """Ping attached runs' orchestrators; a run whose actor died is detached."""
        if pings:
            ready, _ = ray.wait(list(pings), num_returns=len(pings), timeout=0)
            for ref in ready:
                run = pings.pop(ref)
                try:
                    ray.get(ref)
                except ActorUnavailableError:
                    continue
                except RayActorError:
                    with self._lock:
                        if run in self._runs:
                            del self._runs[run]
                            logger.info("semaphore %r: run %s is gone", self._table.scope, run, extra=_LOG_EXTRA)
                            if not self._runs and self._runs_known:
                                self._retire("every run that used it is gone")
        with self._lock:
            asked = set(pings.values())
            for run, handle in self._runs.items():
                if run not in asked:
                    pings[handle.__ray_ready__.remote()] = run
        return pings

    def _end_self(self) -> None:
        logger.info("semaphore %r: retired and no lease held; ending", self._table.scope, extra=_LOG_EXTRA)
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    def _wake(self, decided: list[tuple[str, Outcome]]) -> None:
        """Resolve the parked calls of decided requests and the contention watches (caller
        holds the lock)."""
        for lease_id, outcome in decided:
            for loop, fut in self._listeners.pop(lease_id, []):
                self._post(loop, fut, outcome)
        contended = self._table.waiting > 0
        for seen, loop, fut in self._watchers:
            if seen != contended:
                self._post(loop, fut, contended)

    def _post(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any], value: Any) -> None:
        try:
            loop.call_soon_threadsafe(_settle, fut, value)
        except RuntimeError:
            # The loop is closed: the actor is shutting down and the call is gone.
            logger.warning(
                "semaphore %r: cannot wake a parked call (%s): its event loop is closed",
                self._table.scope, value, exc_info=True, extra=_LOG_EXTRA,
            )

    def _forget(self, lease_id: str, fut: asyncio.Future[Outcome]) -> None:
        remaining = [(lp, f) for lp, f in self._listeners.get(lease_id, []) if f is not fut]
        if remaining:
            self._listeners[lease_id] = remaining
        else:
            self._listeners.pop(lease_id, None)
