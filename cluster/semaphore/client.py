"""The cluster-wide bounded semaphore that caps one orchestrator's handoffs in flight.

``ClusterSemaphore(scope)`` is a typed facade over the scope's lease table, held by one of a
few detached service actors (``soloist:sem-service:<i>`` in namespace ``soloist``; the
scope's is fixed by a hash of its name, see ``_placement``), so every process of the
cluster that opens the same scope shares one table. A permit is a *lease*: it has a
client-made id, a holder, and an expiry that the holder's process renews by heartbeat every
``ttl_s/3``. A holder that dies stops renewing and its permit goes to the next waiter after
``ttl_s``. A *guarded* lease (``acquire(owner=...)``: held by the actor that runs the
admitted work) is never freed on the clock alone: once it misses its renewals the service
asks the owner through Ray, and frees it only when the owner says it does not hold it or Ray
says the owner died; ``report_lost`` (a requester whose call to the owner failed) makes it
ask at once. Every grant carries a ``generation`` (fencing): ``holds(lease)`` tells a
holder, without a round trip, whether a lease it kept is surely still its own.

At most ``min(limit, permits)`` leases are held at once, where ``permits`` (1..4) is fixed
per scope and ``limit`` (1..4) is passed by each acquire. Waiters are served FIFO.

Restart safety: the tables live in the service's memory. A restarted service rebuilds a
scope's table from the first call that names it (each call carries the scope's
configuration); within ``ttl_s`` of the restart the table is ``recovering``: it grants
nothing, and the heartbeats of live holders re-register the leases they hold, so the table
is rebuilt before any new permit is granted.

Budgets: a scope may also have a ``Budget`` (requests and tokens per sliding window, from
the usage its holders report at release: see ``_budget``). Its grants then wait until the
window has room, cluster-wide, and a restart of the service does not reset the window.
``acquire(tokens=...)`` reserves an estimate; ``release(lease, used_tokens=...)`` settles it.

Layout: ``_lease_table`` (the pure state machine), ``_scope`` (one scope inside a service),
``_service`` (the actor), ``_placement`` (which service holds a scope), ``_heartbeat`` (the
per-process renewals), ``_models`` (the public models and argument checks), and here the facade.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, AsyncContextManager, TypeVar

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from cluster import metrics
from cluster.connect import SOLOIST_NAMESPACE, wait_ref
from cluster.exceptions import SemaphoreConfigConflict, SemaphoreTimeout, SemaphoreUnavailable
from cluster.semaphore._budget import Budget, BudgetWindow
from cluster.semaphore._heartbeat import actor_gone, done_acquiring, heartbeat_for, heartbeats_of, held_by_this_process, note_acquiring
from cluster.semaphore._lease_table import Outcome
from cluster.semaphore._models import (
    HARD_MAX_PERMITS,
    Lease,
    SemaphoreStatistics,
    ServiceStatistics,
    check_acquire,
    check_config,
)
from cluster.semaphore._placement import forget_service, running_service, service_for, service_name, service_names
from cluster.semaphore._scope import Detached, ScopeConfig, ScopeGone, ScopeKey

__all__ = [
    "ClusterSemaphore", "Lease", "SemaphoreStatistics", "ServiceStatistics", "HARD_MAX_PERMITS", "held_by_this_process",
]

logger = logging.getLogger(__name__)
_LOG_EXTRA = {"component": "cluster-semaphore"}

_RETRY_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
_DEADLINE_GRACE_S = 2.0
_DESTROY_TIMEOUT_S = 30.0
_DEFAULT_TTL_S = 10.0

_T = TypeVar("_T")


# --------------------------------------------------------------------------- lookups


def _no_table(scope: str) -> SemaphoreUnavailable:
    return SemaphoreUnavailable(f"semaphore {scope!r}: no service holds it (every run using it was closed)")


def _config_of(scope: str, answer: ScopeConfig | None) -> ScopeConfig:
    if answer is None:
        raise _no_table(scope)
    return answer


def _send_suspect(scope: str, owner: Any) -> None:
    """``report_lost``'s message: find the scope's service and tell it to check ``owner``."""
    handle = running_service(scope)
    if handle is None:
        logger.info("semaphore %r: no service runs; nothing to check", scope, extra=_LOG_EXTRA)
        return
    handle.suspect.remote(scope, owner)


def _default_holder() -> str:
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    where = task.get_name() if task is not None else threading.current_thread().name
    return f"{os.getpid()}@{socket.gethostname()}:{where}"


# --------------------------------------------------------------------------- the facade


def _rebuild(scope: str, permits: int, ttl_s: float, budget: Budget | None = None) -> ClusterSemaphore:
    return ClusterSemaphore(scope, permits=permits, ttl_s=ttl_s, budget=budget)


class ClusterSemaphore:
    """A bounded semaphore shared by every process of the cluster that opens ``scope``.

    Ray must be initialised. Constructing one opens the scope (creating its table on its
    service if missing; the service itself is started on first use). The facade pickles (by
    scope, permits and ttl_s), so it can be shipped into actors; every copy talks to the
    same table.

    ``budget``: requests and tokens per sliding window for the whole scope (see the module
    docstring); None: the cap alone.
    """

    def __init__(
        self, scope: str, *, permits: int = HARD_MAX_PERMITS, ttl_s: float = _DEFAULT_TTL_S,
        budget: Budget | None = None, _handle: Any = None,
    ) -> None:
        check_config(scope, permits, ttl_s)
        if budget is not None and not isinstance(budget, Budget):
            raise TypeError(f"ClusterSemaphore(budget=...) takes a cluster.semaphore.Budget or None, "
                            f"got {type(budget).__name__}")
        if not ray.is_initialized():
            raise SemaphoreUnavailable(
                f"semaphore {scope!r}: Ray is not initialised; call cluster.connect() "
                "or ray.init() before opening a ClusterSemaphore"
            )
        self._scope = scope
        self._permits = permits
        self._ttl_s = float(ttl_s)
        self._budget = budget
        self._name = service_name(scope)
        # A facade joined to a live table (``existing``) never creates one; a constructed
        # one creates the scope until the service has answered it once (then the scope
        # exists, and a later absence means it was destroyed or retired).
        self._creates = _handle is None
        self._known = _handle is not None
        self._handle = _handle if _handle is not None else service_for(scope)
        self._actor_id: str = self._handle._actor_id.hex()
        self._heartbeat = heartbeat_for(self._name, self._actor_id, self._handle)
        self._config_checked = False
        # Releases started during cancellation; kept referenced until they finish.
        self._cleanups: set[asyncio.Task[bool]] = set()
        if self._creates:
            self._handle.open_scope.remote(self._key())  # the scope exists from here, as its actor did

    @classmethod
    def existing(cls, scope: str) -> ClusterSemaphore:
        """Join the scope's live table, whatever its configuration; never create one.

        Blocking (one round trip to the service): code on an event loop awaits
        ``existing_async`` instead. Raises ``SemaphoreUnavailable`` when no service holds
        ``scope`` (its runs were closed).
        """
        if not ray.is_initialized():
            raise SemaphoreUnavailable(f"semaphore {scope!r}: Ray is not initialised")
        handle = running_service(scope)
        if handle is None:
            raise _no_table(scope)
        try:
            permits, ttl_s, budget = _config_of(scope, wait_ref(handle.config.remote(scope)))
        except RayActorError:
            forget_service(service_name(scope), handle)
            raise _no_table(scope) from None
        return cls(scope, permits=permits, ttl_s=ttl_s, budget=budget, _handle=handle)

    @classmethod
    async def existing_async(cls, scope: str) -> ClusterSemaphore:
        """``existing`` for an event loop: never blocks it (the lookup of the service, a
        round trip to Ray's control store, runs on a thread) and never calls ``ray.get``
        (which, in an async actor, blocks its loop and prints Ray's warning)."""
        if not ray.is_initialized():
            raise SemaphoreUnavailable(f"semaphore {scope!r}: Ray is not initialised")
        handle = await asyncio.to_thread(running_service, scope)
        if handle is None:
            raise _no_table(scope)
        try:
            permits, ttl_s, budget = _config_of(scope, await handle.config.remote(scope))
        except RayActorError:
            forget_service(service_name(scope), handle)
            raise _no_table(scope) from None
        return cls(scope, permits=permits, ttl_s=ttl_s, budget=budget, _handle=handle)

    @classmethod
    def open(
        cls, scope: str, *, permits: int = HARD_MAX_PERMITS, ttl_s: float = _DEFAULT_TTL_S, budget: Budget | None = None
    ) -> ClusterSemaphore:
        """Join the scope's live table whatever its configuration, or create it with this one."""
        try:
            return cls.existing(scope)
        except SemaphoreUnavailable:
            return cls(scope, permits=permits, ttl_s=ttl_s, budget=budget)

    @classmethod
    def join_run(
        cls, scope: str, run: str, orchestrator: Any, *, timeout: float = 60.0, start_timeout: float = 600.0
    ) -> ClusterSemaphore:
        """Open (or create) ``scope`` and record the run ``run`` (its orchestrator actor) as one
        of its users, so the scope's table lives exactly as long as some run uses it.

        Blocking (a run's constructor is synchronous). A scope whose last run has just closed
        serves again at once (its table, with the leases still held, is kept until they are
        released). ``start_timeout`` bounds the service's first answer (on a loaded node a
        new worker process can take over a minute to start); ``timeout`` bounds the retries
        while the service restarts.
        """
        if not ray.is_initialized():
            raise SemaphoreUnavailable(f"semaphore {scope!r}: Ray is not initialised")
        # One round trip: the attach creates the scope with the defaults if it is missing
        # and answers with the configuration the scope has.
        key = ScopeKey(scope, HARD_MAX_PERMITS, _DEFAULT_TTL_S, create=True)
        started = time.monotonic()
        while True:
            handle = service_for(scope)
            try:
                permits, ttl_s, budget = wait_ref(handle.attach_run.remote(key, run, orchestrator),
                                                  timeout=start_timeout)
                return cls(scope, permits=permits, ttl_s=ttl_s, budget=budget, _handle=handle)
            except GetTimeoutError:
                raise SemaphoreUnavailable(
                    f"semaphore {scope!r}: its actor did not answer run {run!r} within {start_timeout:g}s "
                    "(it could not start or is unreachable); check the cluster's nodes with `ray status`"
                ) from None
            except RayActorError:
                if actor_gone(service_name(scope), handle._actor_id.hex()):
                    forget_service(service_name(scope), handle)
            if time.monotonic() - started > timeout:
                raise SemaphoreUnavailable(
                    f"semaphore {scope!r}: run {run!r} could not join it within {timeout:g}s "
                    f"(its service {service_name(scope)!r} kept failing); check the cluster with `ray status`"
                )
            time.sleep(0.05)

    @classmethod
    async def leave_run(cls, scope: str, run: str) -> Detached | None:
        """``run`` (closed) no longer uses ``scope``. Returns ``in-use`` (other runs do),
        ``retiring`` (its table is dropped once the work of its held leases has returned),
        ``retired`` (dropped now), or None when no service holds the scope any more."""
        handle = await asyncio.to_thread(running_service, scope)
        if handle is None:
            return None
        try:
            outcome: Detached | None = await handle.detach_run.remote(scope, run)
        except RayActorError:
            return None  # the service ended meanwhile: its tables went with it
        if outcome == "retired":
            for beat in heartbeats_of(service_name(scope)):
                beat.drop_scope(scope)
            logger.info("semaphore %r retired with its last run %r", scope, run, extra=_LOG_EXTRA)
        return outcome

    @classmethod
    def report_lost(cls, scope: str, owner: Any) -> None:
        """A call to ``owner`` (an actor taking guarded leases of ``scope``: see ``acquire``)
        failed because Ray lost the actor: ask the scope's service to check that owner with
        Ray now, so a dead owner's permits come back at once instead of after its leases miss
        their renewals. Safe whatever the truth: the service frees nothing on this word
        alone, and an owner that is alive keeps its permits.

        Returns at once, without waiting for an answer (no event loop needed, none blocked):
        finding the service is a round trip to Ray's control store, made on a thread of its
        own. When no service runs there is no permit to recover; a report that is lost
        leaves the leases to the probe that follows their missed renewals.
        """
        threading.Thread(target=_send_suspect, args=(scope, owner), name=f"sem-report:{scope}", daemon=True).start()

    @staticmethod
    def service_name(scope: str) -> str:
        """The name (in namespace ``soloist``) of the service actor that holds ``scope``: the
        same in every process, computed from the name alone."""
        return service_name(scope)

    @staticmethod
    def service_names() -> list[str]:
        """The names of every semaphore service actor (``SERVICE_COUNT`` of them), started or not."""
        return service_names()

    @classmethod
    async def service_statistics(cls) -> list[ServiceStatistics]:
        """A report of each semaphore service actor that runs (none is started for this)."""
        reports = []
        for name in service_names():
            try:
                handle = await asyncio.to_thread(ray.get_actor, name, namespace=SOLOIST_NAMESPACE)
            except ValueError:
                continue
            reports.append(ServiceStatistics.model_validate(await handle.service_statistics.remote()))
        return reports

    @property
    def scope(self) -> str:
        """The scope this semaphore caps (usually one orchestrator)."""
        return self._scope

    @property
    def ttl_s(self) -> float:
        """Seconds a plain lease lives without renewal."""
        return self._ttl_s

    @property
    def budget(self) -> Budget | None:
        """The scope's requests and tokens per window (None: the cap alone)."""
        return self._budget

    def __repr__(self) -> str:
        budget = "" if self._budget is None else f", budget={self._budget!r}"
        return f"ClusterSemaphore({self._scope!r}, permits={self._permits}, ttl_s={self._ttl_s:g}{budget})"

    def __reduce__(
        self,
    ) -> tuple[Callable[[str, int, float, Budget | None], ClusterSemaphore], tuple[str, int, float, Budget | None]]:
        """Pickle by configuration; the copy reattaches to the same table."""
        return (_rebuild, (self._scope, self._permits, self._ttl_s, self._budget))

    async def acquire(
        self, *, limit: int = HARD_MAX_PERMITS, timeout: float | None = None, holder: str | None = None, owner: Any = None,
        tokens: int | None = None,
    ) -> Lease:
        """Wait for a permit while fewer than ``min(limit, permits)`` are held cluster-wide.

        ``owner``: the calling actor's own handle, when this actor runs the work the permit
        admits and implements ``holds_leases(ids) -> list[bool]`` (answer with
        ``held_by_this_process``) and ``renew_leases() -> bool`` (answer with
        ``renew_held_leases``: a restarted service asks it before it grants again). The lease is then guarded: it is freed only when the
        owner says it no longer holds it or Ray says the owner died, never because the
        owner was paused past ``ttl_s``.

        Raises ``SemaphoreTimeout`` after ``timeout`` seconds, ``SemaphoreUnavailable`` if
        the scope is gone or retired, ``SemaphoreConfigConflict`` if the scope has another
        configuration. If the caller is cancelled, the request is withdrawn (or the permit
        released) before the cancellation goes on.

        ``tokens``: on a scope with a budget, the tokens to reserve for the work this permit
        admits (an estimate: the prompt and ``max_tokens``); None reserves the budget's
        ``reserve_tokens``. Release with ``used_tokens`` to settle it. A reservation larger
        than the whole budget raises ``BudgetConfigError`` (it could never be granted).
        """
        check_acquire(limit, timeout, holder)
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0):
            raise ValueError(f"acquire(tokens=...) must be None or an int >= 0, got {tokens!r}")
        await self._check_config_once()
        if self._budget is not None:
            BudgetWindow(self._budget).check_fits(tokens)
        if owner is not None:
            holder = f"actor:{ray.get_runtime_context().get_worker_id()}"
        lease = Lease(
            lease_id=uuid.uuid4().hex, scope=self._scope, holder=holder or _default_holder(), limit=limit,
            guarded=owner is not None,
        )
        deadline = None if timeout is None else time.monotonic() + timeout
        sent = time.monotonic()
        if lease.guarded:
            note_acquiring(lease.lease_id)  # a probe meanwhile counts it as held (see note_acquiring)
        try:
            try:
                outcome, generation, budget_wait = await self._request(lease, deadline, owner, tokens)
            except BaseException:
                await self._withdraw(lease)
                raise
            if self._budget is not None and outcome == "granted":
                metrics.record_budget_wait(self._scope, budget_wait)
            if outcome == "granted":
                lease = lease.model_copy(update={"generation": generation})
                self._heartbeat.add(lease, self._key(), sent, owner)
                return lease
            await self._withdraw(lease)
        finally:
            if lease.guarded:
                done_acquiring(lease.lease_id)
        if outcome == "timeout":
            raise SemaphoreTimeout(self._scope, limit, float(timeout or 0.0))
        if outcome == "withdrawn":
            raise SemaphoreUnavailable(
                f"semaphore {self._scope!r} is retired: every run that used it was closed"
            )
        # A fresh id is never released before it is requested: reaching this is a bug.
        raise RuntimeError(
            f"semaphore {self._scope!r}: request {lease.lease_id} got outcome {outcome!r}"
        )

    async def release(self, lease: Lease, *, used_tokens: int | None = None) -> bool:
        """Return a permit; False if it was unknown, already released, or had expired.

        ``used_tokens``: the tokens the admitted work used, as its responses reported them
        (settles the grant's charge on a budgeted scope; None keeps the reservation).
        Raises ``SemaphoreUnavailable`` if the scope is gone (the permit went with it).
        """
        if not isinstance(lease, Lease):
            raise TypeError(f"release() expects a Lease, got {type(lease).__name__}")
        if lease.scope != self._scope:
            raise ValueError(
                f"lease {lease.lease_id} belongs to scope {lease.scope!r}, not {self._scope!r}"
            )
        self._heartbeat.discard(lease.lease_id)
        return await self._call(lambda key: self._handle.release.remote(key, lease.lease_id, used_tokens))

    def release_nowait(self, lease: Lease, *, used_tokens: int | None = None) -> None:
        """Send the release without waiting for the answer (no event loop needed).

        The cap stays safe: the service counts the permit as held until it processes the
        release. If the message is lost (service restarting), the lease is no longer
        renewed and expires after ``ttl_s``.
        """
        if lease.scope != self._scope:
            raise ValueError(f"lease {lease.lease_id} belongs to scope {lease.scope!r}, not {self._scope!r}")
        self._heartbeat.discard(lease.lease_id)
        self._handle.release.remote(self._key(), lease.lease_id, used_tokens)

    def hold(self, *, limit: int = HARD_MAX_PERMITS, timeout: float | None = None) -> AsyncContextManager[Lease]:
        """``async with sem.hold(limit=n):`` acquire, run the body, release (also on cancel)."""
        check_acquire(limit, timeout, None)
        return self._hold(limit, timeout)

    @contextlib.asynccontextmanager
    async def _hold(self, limit: int, timeout: float | None) -> AsyncIterator[Lease]:
        lease = await self.acquire(limit=limit, timeout=timeout)
        try:
            yield lease
        except BaseException:
            await self._withdraw(lease)
            raise
        await self.release(lease)

    def holds(self, lease: Lease) -> bool:
        """Whether this process surely still holds ``lease`` (no round trip): the fencing
        check before a lease is reused. False once a renewal found it lost, and for a plain
        lease whose last confirmed renewal is older than two thirds of ``ttl_s``."""
        return self._heartbeat.holds(lease)

    async def watch(self, contended: bool) -> bool:
        """Wait until "some request is waiting" differs from ``contended``; return it now."""
        return await self._call(lambda key: self._handle.watch.remote(key, contended))

    def watch_ref(self, contended: bool) -> Any:
        """``watch`` as a Ray object ref (for a thread that waits on its future)."""
        return self._handle.watch.remote(self._key(), contended)

    async def statistics(self) -> SemaphoreStatistics:
        """The scope's current report."""
        report = await self._call(lambda key: self._handle.statistics.remote(key))
        return SemaphoreStatistics.model_validate(report)

    async def reset_peak(self) -> None:
        """Restart ``statistics().max_held`` from the number of leases held now."""
        await self._call(lambda key: self._handle.reset_peak.remote(key))

    def destroy(self) -> None:
        """Drop the scope's table for good (its service goes on serving the other scopes);
        every holder's permits of this scope vanish with it. Blocking: one round trip."""
        self._heartbeat.drop_scope(self._scope)
        try:
            wait_ref(self._handle.destroy_scope.remote(self._scope), timeout=_DESTROY_TIMEOUT_S)
        except (GetTimeoutError, RayActorError):
            logger.warning("semaphore %r: its service did not confirm the destroy", self._scope,
                           exc_info=True, extra=_LOG_EXTRA)
        self._known = True  # never created again by this facade
        logger.info("semaphore %r destroyed", self._scope, extra=_LOG_EXTRA)

    # -- internals --------------------------------------------------------------------

    def _key(self) -> ScopeKey:
        return ScopeKey(self._scope, self._permits, self._ttl_s, self._creates and not self._known, self._budget)

    async def _check_config_once(self) -> None:
        if self._config_checked:
            return
        answer = await self._call(lambda key: self._handle.open_scope.remote(key))
        if answer is None:
            raise self._gone()
        permits, ttl_s, budget = answer
        if (permits, ttl_s, budget) != (self._permits, self._ttl_s, self._budget):
            raise SemaphoreConfigConflict(
                f"semaphore {self._scope!r} already exists with permits={permits}, "
                f"ttl_s={ttl_s:g}, budget={budget!r}; asked for permits={self._permits}, ttl_s={self._ttl_s:g}, "
                f"budget={self._budget!r} (join it as it is with ClusterSemaphore.open or .existing)"
            )
        self._config_checked = True

    async def _request(
        self, lease: Lease, deadline: float | None, owner: Any, tokens: int | None
    ) -> tuple[Outcome, int, float]:
        """Ask the service for ``lease``, retrying the same id across service restarts."""
        async def submit(key: ScopeKey) -> tuple[Outcome, int, float]:
            args = (key, lease.lease_id, lease.holder, lease.limit)
            if deadline is None:
                outcome, generation, waited = await self._handle.acquire.remote(*args, None, owner, tokens)
                return outcome, generation, waited
            remaining = max(0.0, deadline - time.monotonic())
            ref = self._handle.acquire.remote(*args, remaining, owner, tokens)
            try:
                # The service answers by the deadline; the grace only covers a restart in between.
                outcome, generation, waited = await asyncio.wait_for(ref, remaining + _DEADLINE_GRACE_S)
                return outcome, generation, waited
            except asyncio.TimeoutError:
                return "timeout", 0, 0.0  # the caller withdraws the request, wherever it is

        return await self._call(submit)

    async def _call(self, submit: Callable[[ScopeKey], Awaitable[_T]]) -> _T:
        """Run one service call for this scope, resubmitting while the service restarts.

        Raises ``SemaphoreUnavailable`` when the scope's table is gone (destroyed, or
        retired with its last run), when the service is gone for good, or when it stayed
        unreachable for ``max(30, 3 * ttl_s)`` seconds.
        """
        budget = max(30.0, 3 * self._ttl_s)
        first_failure: float | None = None
        attempt = 0
        while True:
            try:
                answer = await submit(self._key())
            except ScopeGone:
                raise self._gone() from None
            except RayActorError as err:
                now = time.monotonic()
                first_failure = now if first_failure is None else first_failure
                if await asyncio.to_thread(actor_gone, self._name, self._actor_id):
                    forget_service(self._name, self._handle)
                    raise SemaphoreUnavailable(
                        f"semaphore {self._scope!r}: its service {self._name!r} (namespace "
                        f"{SOLOIST_NAMESPACE!r}) was destroyed or died permanently"
                    ) from err
                if now - first_failure > budget:
                    raise SemaphoreUnavailable(
                        f"semaphore {self._scope!r}: service {self._name!r} unreachable for "
                        f"{now - first_failure:.1f}s (budget {budget:g}s)"
                    ) from err
                delay = _RETRY_BACKOFF_S[min(attempt, len(_RETRY_BACKOFF_S) - 1)]
                attempt += 1
                logger.info(
                    "semaphore %r: service unreachable (%s); retrying in %.2fs",
                    self._scope, type(err).__name__, delay, extra=_LOG_EXTRA,
                )
                await asyncio.sleep(delay)
                continue
            self._known = True
            return answer

    def _gone(self) -> SemaphoreUnavailable:
        return SemaphoreUnavailable(
            f"semaphore {self._scope!r} was destroyed or died permanently: its service {self._name!r} "
            "holds no table for it any more (destroyed, or retired when its last run was closed)"
        )

    async def _withdraw(self, lease: Lease) -> None:
        """Make sure ``lease`` holds nothing, even while the calling task is being cancelled.

        The release runs in its own task (shielded), so a second cancellation cannot stop
        it. If the scope is gone, the failure is logged: there is nothing left to leak.
        """
        self._heartbeat.discard(lease.lease_id)
        task = asyncio.ensure_future(self.release(lease))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        try:
            await asyncio.shield(task)
        except SemaphoreUnavailable:
            logger.warning(
                "semaphore %r: could not withdraw lease %s; its table is gone",
                self._scope, lease.lease_id, exc_info=True, extra=_LOG_EXTRA,
            )
