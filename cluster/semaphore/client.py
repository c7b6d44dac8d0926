"""The cluster-wide bounded semaphore that caps one orchestrator's handoffs in flight.

``ClusterSemaphore(scope)`` is a typed facade over one named, detached async actor
(``soloist:sem:{scope}`` in namespace ``soloist``), so every process of the cluster that
opens the same scope shares one lease table. A permit is a *lease*: it has a client-made
id, a holder, and an expiry that the holder's process renews by heartbeat every ``ttl_s/3``.
A holder that dies stops renewing and its permit goes to the next waiter after ``ttl_s``.
A *guarded* lease (``acquire(owner=...)``: held by the actor that runs the admitted work)
is never freed on the clock alone: once it misses its renewals the semaphore asks the owner
through Ray, and frees it only when the owner says it does not hold it or Ray says the
owner died; ``report_lost`` (a requester whose call to the owner failed) makes it ask at
once. Every grant carries a ``generation`` (fencing): ``holds(lease)`` tells a holder,
without a round trip, whether a lease it kept is surely still its own.

At most ``min(limit, permits)`` leases are held at once, where ``permits`` (1..4) is fixed
per scope and ``limit`` (1..4) is passed by each acquire. Waiters are served FIFO.

Restart safety: the table lives in the actor's memory. A restarted actor enters the
``recovering`` state for ``ttl_s``: it grants nothing, and the heartbeats of live holders
re-register the leases they hold, so the table is rebuilt before any new permit is granted.

Layout: ``cluster.semaphore._lease_table`` (the pure state machine), ``cluster.semaphore._actor``
(the actor around it), and here the public models, the per-process heartbeat and the facade.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, AsyncContextManager, TypeVar

import ray
from pydantic import BaseModel
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster.connect import wait_ref
from cluster.exceptions import (
    SemaphoreConfigConflict,
    SemaphoreTimeout,
    SemaphoreUnavailable,
)
from cluster.process import Table, process_registry
from cluster.semaphore._actor import Detached, SemaphoreActor
from cluster.semaphore._lease_table import Outcome, SemaphoreState

__all__ = ["ClusterSemaphore", "Lease", "SemaphoreStatistics", "HARD_MAX_PERMITS", "held_by_this_process"]

logger = logging.getLogger(__name__)
_LOG_EXTRA = {"component": "cluster-semaphore"}

HARD_MAX_PERMITS = 4
"""No scope ever has more than four permits (the orchestrator's parallel-handoff cap)."""

_NAMESPACE = "soloist"
_MIN_TTL_S = 0.5
_RETRY_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
_DEADLINE_GRACE_S = 2.0

_T = TypeVar("_T")


class Lease(BaseModel, frozen=True):
    """One granted permit. ``lease_id`` is unique; pass the lease back to ``release``.

    ``generation`` is the fencing token the semaphore gave this grant (0 until granted);
    ``guarded`` leases are held by an actor and freed on Ray's verdict, not the clock.
    """

    lease_id: str
    scope: str
    holder: str
    limit: int
    generation: int = 0
    guarded: bool = False


class SemaphoreStatistics(BaseModel, frozen=True):
    """A point-in-time report of one scope's semaphore. Counters restart with the actor."""

    scope: str
    permits: int
    held: int
    waiting: int
    granted_total: int
    released_total: int
    expired_total: int
    max_held: int
    state: SemaphoreState
    ttl_s: float
    generation: int = 0
    suspects: int = 0
    runs: int = 0
    retired: bool = False


# --------------------------------------------------------------------------- validation


def _actor_name(scope: str) -> str:
    return f"soloist:sem:{scope}"


def _check_int(name: str, value: object, low: int, high: int) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return f"{name} must be an int in {low}..{high}, got {value!r}"
    return None


def _check_config(scope: object, permits: object, ttl_s: object) -> None:
    """Raise one ``ValueError`` listing every bad constructor argument."""
    problems: list[str] = []
    if not isinstance(scope, str) or not scope.strip():
        problems.append(f"scope must be a non-empty string, got {scope!r}")
    if (problem := _check_int("permits", permits, 1, HARD_MAX_PERMITS)) is not None:
        problems.append(problem)
    if (
        isinstance(ttl_s, bool)
        or not isinstance(ttl_s, (int, float))
        or not math.isfinite(ttl_s)
        or ttl_s < _MIN_TTL_S
    ):
        problems.append(f"ttl_s must be a finite number >= {_MIN_TTL_S}, got {ttl_s!r}")
    if problems:
        raise ValueError("invalid ClusterSemaphore arguments: " + "; ".join(problems))


def _check_acquire(limit: object, timeout: object, holder: object) -> None:
    """Raise one ``ValueError`` listing every bad ``acquire`` argument."""
    problems: list[str] = []
    if (problem := _check_int("limit", limit, 1, HARD_MAX_PERMITS)) is not None:
        problems.append(problem)
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout < 0
    ):
        problems.append(f"timeout must be None or a finite number >= 0, got {timeout!r}")
    if holder is not None and (not isinstance(holder, str) or not holder):
        problems.append(f"holder must be None or a non-empty string, got {holder!r}")
    if problems:
        raise ValueError("invalid acquire arguments: " + "; ".join(problems))


# --------------------------------------------------------------------------- heartbeat


def _actor_gone(name: str, actor_id: str) -> bool:
    """True when the named actor no longer exists, or the name now belongs to another one."""
    try:
        current = ray.get_actor(name, namespace=_NAMESPACE)
    except ValueError:
        return True
    # ActorHandle has no public id accessor; _actor_id is stable across Ray releases.
    return current._actor_id.hex() != actor_id


class _Heartbeat:
    """Renews every lease this process holds on one semaphore actor, every ``ttl_s/3``.

    One per process per actor (see ``_heartbeat_for``); its daemon thread runs only while
    leases are held, so sync and async callers alike keep their leases alive. The thread
    waits with ``wait_ref``: in an async actor (a replica) ``ray.get`` would warn.
    """

    def __init__(self, name: str, actor_id: str, handle: Any, ttl_s: float) -> None:
        self._name = name
        self._actor_id = actor_id
        self._handle = handle
        self._interval = ttl_s / 3
        self._lock = threading.Lock()
        # Leases granted to this process and not yet released; exactly the set renewed.
        self._leases: dict[str, Lease] = {}
        # lease_id -> local monotonic time until which the semaphore surely still holds it
        # (the send time of the last renewal it confirmed, plus ttl).
        self._confirmed_until: dict[str, float] = {}
        self._ttl_s = ttl_s
        # This process's actor, when it holds guarded leases (sent with renewals, so a
        # restarted semaphore can probe it again).
        self._owner: Any = None
        # The running renewal thread, or None when no lease is held.
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    def add(self, lease: Lease, since: float, owner: Any = None) -> None:
        """Start renewing ``lease`` (granted by a request sent at local time ``since``)."""
        with self._lock:
            self._leases[lease.lease_id] = lease
            self._confirmed_until[lease.lease_id] = since + self._ttl_s
            if owner is not None:
                self._owner = owner
            if self._thread is None and not self._stopped.is_set():
                self._thread = threading.Thread(
                    target=self._run, name=f"sem-heartbeat:{self._name}", daemon=True
                )
                self._thread.start()

    def discard(self, lease_id: str) -> None:
        """Stop renewing ``lease_id`` (before it is released, so it cannot be revived)."""
        with self._lock:
            self._leases.pop(lease_id, None)
            self._confirmed_until.pop(lease_id, None)

    def holds(self, lease: Lease) -> bool:
        """Whether ``lease`` is surely still held: not reported lost, same generation, and
        (unless guarded) confirmed by a renewal less than two thirds of ``ttl_s`` ago."""
        with self._lock:
            mine = self._leases.get(lease.lease_id)
            if mine is None or mine.generation != lease.generation:
                return False
            if lease.guarded:
                return True
            return time.monotonic() < self._confirmed_until.get(lease.lease_id, 0.0) - self._ttl_s / 3

    def held_ids(self, lease_ids: list[str]) -> list[bool]:
        """For a probe: which of ``lease_ids`` this process holds."""
        with self._lock:
            return [lease_id in self._leases for lease_id in lease_ids]

    def stop(self) -> None:
        """Forget every lease and end the thread (the actor is gone)."""
        self._stopped.set()
        with self._lock:
            self._leases.clear()
            self._confirmed_until.clear()

    def _run(self) -> None:
        wait = self._interval
        while not self._stopped.wait(wait):
            wait = self._interval / 4  # after a failed renewal, try again soon
            with self._lock:
                if not self._leases:
                    self._thread = None
                    return
                batch = list(self._leases.values())
                owner = self._owner
            sent = time.monotonic()
            try:
                results: list[bool] = wait_ref(
                    self._handle.renew.remote(
                        [(x.lease_id, x.holder, x.limit, x.generation, x.guarded) for x in batch], owner
                    ),
                    timeout=self._interval,
                )
            except GetTimeoutError:
                logger.warning(
                    "semaphore %s: lease renewal took longer than %.2fs; retrying",
                    self._name, self._interval, extra=_LOG_EXTRA,
                )
                continue
            except RayActorError:
                if _actor_gone(self._name, self._actor_id):
                    logger.error(
                        "semaphore %s: actor is gone; %d leases of this process dropped",
                        self._name, len(batch), exc_info=True, extra=_LOG_EXTRA,
                    )
                    self._forget_self()
                    return
                logger.info(
                    "semaphore %s: actor unreachable (restarting?); will renew again",
                    self._name, exc_info=True, extra=_LOG_EXTRA,
                )
                continue
            wait = self._interval
            self._reconcile(batch, results, sent)

    def _reconcile(self, batch: list[Lease], results: list[bool], sent: float) -> None:
        revived: list[str] = []
        with self._lock:
            for lease, renewed in zip(batch, results):
                held_here = lease.lease_id in self._leases
                if renewed and held_here:
                    self._confirmed_until[lease.lease_id] = sent + self._ttl_s
                if not renewed and held_here:
                    del self._leases[lease.lease_id]
                    self._confirmed_until.pop(lease.lease_id, None)
                    logger.warning(
                        "semaphore %s: lease %s of %s was lost (expired before renewal)",
                        self._name, lease.lease_id, lease.holder, extra=_LOG_EXTRA,
                    )
                elif renewed and not held_here:
                    revived.append(lease.lease_id)  # released while this renewal was in flight
        for lease_id in revived:
            try:
                wait_ref(self._handle.release.remote(lease_id), timeout=self._interval)
            except (GetTimeoutError, RayActorError):
                logger.warning(
                    "semaphore %s: could not re-release lease %s; it expires in ttl",
                    self._name, lease_id, exc_info=True, extra=_LOG_EXTRA,
                )

    def _forget_self(self) -> None:
        self.stop()
        _HEARTBEATS.discard((self._name, self._actor_id), self)


# (actor name, actor id) -> the heartbeat of this process for that actor, in the
# per-process registry (see ``cluster.process``).
_HEARTBEATS: Table[tuple[str, str], _Heartbeat] = process_registry().semaphore_heartbeats


def _heartbeat_for(name: str, actor_id: str, handle: Any, ttl_s: float) -> _Heartbeat:
    return _HEARTBEATS.get_or_create((name, actor_id), lambda: _Heartbeat(name, actor_id, handle, ttl_s))


def held_by_this_process(lease_ids: list[str]) -> list[bool]:
    """Which of ``lease_ids`` this process holds (the answer an owner gives a probe)."""
    beats = _HEARTBEATS.select(lambda _key: True)
    answers = [False] * len(lease_ids)
    for beat in beats:
        answers = [a or b for a, b in zip(answers, beat.held_ids(lease_ids))]
    return answers


def _send_suspect(scope: str, owner: Any) -> None:
    """``report_lost``'s message: find the scope's actor and tell it to check ``owner``."""
    try:
        handle = ray.get_actor(_actor_name(scope), namespace=_NAMESPACE)
    except ValueError:
        logger.info("semaphore %r: no actor serves it; nothing to check", scope, extra=_LOG_EXTRA)
        return
    handle.suspect.remote(owner)


def _default_holder() -> str:
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    where = task.get_name() if task is not None else threading.current_thread().name
    return f"{os.getpid()}@{socket.gethostname()}:{where}"


# --------------------------------------------------------------------------- the facade


def _rebuild(scope: str, permits: int, ttl_s: float) -> ClusterSemaphore:
    return ClusterSemaphore(scope, permits=permits, ttl_s=ttl_s)


class ClusterSemaphore:
    """A bounded semaphore shared by every process of the cluster that opens ``scope``.

    Ray must be initialised. The facade pickles (by scope, permits and ttl_s), so it can be
    shipped into actors; every copy talks to the same named actor.
    """

    def __init__(self, scope: str, *, permits: int = HARD_MAX_PERMITS, ttl_s: float = 10.0, _handle: Any = None) -> None:
        _check_config(scope, permits, ttl_s)
        if not ray.is_initialized():
            raise SemaphoreUnavailable(
                f"semaphore {scope!r}: Ray is not initialised; call cluster.connect() "
                "or ray.init() before opening a ClusterSemaphore"
            )
        self._scope = scope
        self._permits = permits
        self._ttl_s = float(ttl_s)
        self._name = _actor_name(scope)
        self._handle = _handle or SemaphoreActor.options(  # type: ignore[attr-defined]
            name=self._name,
            namespace=_NAMESPACE,
            get_if_exists=True,
            lifetime="detached",
            max_restarts=-1,
            num_cpus=0,
            # Prefer the creating process's node (the driver's, usually the head): worker
            # nodes come and go, and every restart costs a recovery window of one TTL.
            scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True),
        ).remote(scope, permits, self._ttl_s)
        self._actor_id: str = self._handle._actor_id.hex()
        self._heartbeat = _heartbeat_for(self._name, self._actor_id, self._handle, self._ttl_s)
        self._config_checked = False
        # Releases started during cancellation; kept referenced until they finish.
        self._cleanups: set[asyncio.Task[bool]] = set()

    @classmethod
    def existing(cls, scope: str) -> ClusterSemaphore:
        """Join the scope's live actor, whatever its configuration; never create one.

        Blocking (one round trip to the actor): code on an event loop runs it in a thread
        (``asyncio.to_thread``). Raises ``SemaphoreUnavailable`` when no actor serves
        ``scope`` (its runs were closed).
        """
        if not ray.is_initialized():
            raise SemaphoreUnavailable(f"semaphore {scope!r}: Ray is not initialised")
        try:
            handle = ray.get_actor(_actor_name(scope), namespace=_NAMESPACE)
        except ValueError:
            raise SemaphoreUnavailable(
                f"semaphore {scope!r}: no actor serves this scope (every run using it was closed)"
            ) from None
        permits, ttl_s = wait_ref(handle.config.remote())
        return cls(scope, permits=permits, ttl_s=ttl_s, _handle=handle)

    @classmethod
    def open(cls, scope: str, *, permits: int = HARD_MAX_PERMITS, ttl_s: float = 10.0) -> ClusterSemaphore:
        """Join the scope's live actor whatever its configuration, or create it with this one."""
        try:
            return cls.existing(scope)
        except SemaphoreUnavailable:
            return cls(scope, permits=permits, ttl_s=ttl_s)

    @classmethod
    def join_run(
        cls, scope: str, run: str, orchestrator: Any, *, timeout: float = 60.0, start_timeout: float = 600.0
    ) -> ClusterSemaphore:
        """Open (or create) ``scope`` and record the run ``run`` (its orchestrator actor) as one
        of its users, so the scope's actor lives exactly as long as some run uses it.

        Blocking (a run's constructor is synchronous). A scope whose last run has just closed
        may still have a retired actor, which ends once the work of its last leases has
        returned: this waits for it to end and opens a new one, and raises
        ``SemaphoreUnavailable`` when the scope is still retiring ``timeout`` seconds after
        it was first found retiring. Starting the actor is bounded apart, by
        ``start_timeout``: on a loaded node a new worker process can take over a minute to
        start, and that is not a scope that keeps retiring.
        """
        retiring_since: float | None = None
        while True:
            semaphore = cls.open(scope)
            try:
                if wait_ref(semaphore._handle.attach_run.remote(run, orchestrator), timeout=start_timeout):
                    return semaphore
            except RayActorError:
                pass  # it ended between the lookup and the call: open the scope again
            except GetTimeoutError:
                raise SemaphoreUnavailable(
                    f"semaphore {scope!r}: its actor did not answer run {run!r} within {start_timeout:g}s "
                    "(it could not start or is unreachable); check the cluster's nodes with `ray status`"
                ) from None
            now = time.monotonic()
            retiring_since = now if retiring_since is None else retiring_since
            if now - retiring_since > timeout:
                raise SemaphoreUnavailable(
                    f"semaphore {scope!r}: run {run!r} could not join it within {timeout:g}s "
                    "(its actor kept retiring); close runs that still use it, or retry"
                )
            time.sleep(0.05)  # the retired actor ends once its last leases are released

    @classmethod
    async def leave_run(cls, scope: str, run: str) -> Detached | None:
        """``run`` (closed) no longer uses ``scope``. Returns ``in-use`` (other runs do),
        ``retiring`` (its actor ends itself once the work of its held leases has returned),
        ``retired`` (ended now), or None when no actor serves the scope any more."""
        name = _actor_name(scope)
        try:
            # A round trip to Ray's control store: on a thread, not on the caller's event loop.
            handle = await asyncio.to_thread(ray.get_actor, name, namespace=_NAMESPACE)
        except ValueError:
            return None
        try:
            outcome: Detached = await handle.detach_run.remote(run)
        except RayActorError:
            return None  # it ended meanwhile
        if outcome == "retired":
            for beat in _HEARTBEATS.pop_where(lambda key: key[0] == name):
                beat.stop()
            ray.kill(handle, no_restart=True)
            logger.info("semaphore %r retired with its last run %r", scope, run, extra=_LOG_EXTRA)
        return outcome

    @classmethod
    def report_lost(cls, scope: str, owner: Any) -> None:
        """A call to ``owner`` (an actor taking guarded leases of ``scope``: see ``acquire``)
        failed because Ray lost the actor: ask the scope's semaphore to check that owner with
        Ray now, so a dead owner's permits come back at once instead of after its leases miss
        their renewals. Safe whatever the truth: the semaphore frees nothing on this word
        alone, and an owner that is alive keeps its permits.

        Returns at once, without waiting for an answer (no event loop needed, none blocked):
        finding the scope's actor is a round trip to Ray's control store, made on a thread of
        its own. When no actor serves the scope there is no permit to recover; a report that
        is lost leaves the leases to the probe that follows their missed renewals.
        """
        threading.Thread(target=_send_suspect, args=(scope, owner), name=f"sem-report:{scope}", daemon=True).start()

    @property
    def scope(self) -> str:
        """The scope this semaphore caps (usually one orchestrator)."""
        return self._scope

    @property
    def ttl_s(self) -> float:
        """Seconds a plain lease lives without renewal."""
        return self._ttl_s

    def __repr__(self) -> str:
        return f"ClusterSemaphore({self._scope!r}, permits={self._permits}, ttl_s={self._ttl_s:g})"

    def __reduce__(self) -> tuple[Callable[[str, int, float], ClusterSemaphore], tuple[str, int, float]]:
        """Pickle by configuration; the copy reattaches to the same named actor."""
        return (_rebuild, (self._scope, self._permits, self._ttl_s))

    async def acquire(
        self, *, limit: int = HARD_MAX_PERMITS, timeout: float | None = None, holder: str | None = None, owner: Any = None
    ) -> Lease:
        """Wait for a permit while fewer than ``min(limit, permits)`` are held cluster-wide.

        ``owner``: the calling actor's own handle, when this actor runs the work the permit
        admits and implements ``holds_leases(ids) -> list[bool]`` (answer with
        ``held_by_this_process``). The lease is then guarded: it is freed only when the
        owner says it no longer holds it or Ray says the owner died, never because the
        owner was paused past ``ttl_s``.

        Raises ``SemaphoreTimeout`` after ``timeout`` seconds, ``SemaphoreUnavailable`` if
        the actor is gone or retired, ``SemaphoreConfigConflict`` if the scope has another
        configuration. If the caller is cancelled, the request is withdrawn (or the permit
        released) before the cancellation goes on.
        """
        _check_acquire(limit, timeout, holder)
        await self._check_config_once()
        if owner is not None:
            holder = f"actor:{ray.get_runtime_context().get_worker_id()}"
        lease = Lease(
            lease_id=uuid.uuid4().hex, scope=self._scope, holder=holder or _default_holder(), limit=limit,
            guarded=owner is not None,
        )
        deadline = None if timeout is None else time.monotonic() + timeout
        sent = time.monotonic()
        try:
            outcome, generation = await self._request(lease, deadline, owner)
        except BaseException:
            await self._withdraw(lease)
            raise
        if outcome == "granted":
            lease = lease.model_copy(update={"generation": generation})
            self._heartbeat.add(lease, sent, owner)
            return lease
        await self._withdraw(lease)
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

    async def release(self, lease: Lease) -> bool:
        """Return a permit; False if it was unknown, already released, or had expired.

        Raises ``SemaphoreUnavailable`` if the actor is gone (the permit went with it).
        """
        if not isinstance(lease, Lease):
            raise TypeError(f"release() expects a Lease, got {type(lease).__name__}")
        if lease.scope != self._scope:
            raise ValueError(
                f"lease {lease.lease_id} belongs to scope {lease.scope!r}, not {self._scope!r}"
            )
        self._heartbeat.discard(lease.lease_id)
        return await self._call(lambda: self._handle.release.remote(lease.lease_id))

    def release_nowait(self, lease: Lease) -> None:
        """Send the release without waiting for the answer (no event loop needed).

        The cap stays safe: the actor counts the permit as held until it processes the
        release. If the message is lost (actor restarting), the lease is no longer renewed
        and expires after ``ttl_s``.
        """
        if lease.scope != self._scope:
            raise ValueError(f"lease {lease.lease_id} belongs to scope {lease.scope!r}, not {self._scope!r}")
        self._heartbeat.discard(lease.lease_id)
        self._handle.release.remote(lease.lease_id)

    def hold(self, *, limit: int = HARD_MAX_PERMITS, timeout: float | None = None) -> AsyncContextManager[Lease]:
        """``async with sem.hold(limit=n):`` acquire, run the body, release (also on cancel)."""
        _check_acquire(limit, timeout, None)
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
        return await self._call(lambda: self._handle.watch.remote(contended))

    def watch_ref(self, contended: bool) -> Any:
        """``watch`` as a Ray object ref (for a thread that waits on its future)."""
        return self._handle.watch.remote(contended)

    async def statistics(self) -> SemaphoreStatistics:
        """The actor's current report."""
        report = await self._call(lambda: self._handle.statistics.remote())
        return SemaphoreStatistics.model_validate(report)

    async def reset_peak(self) -> None:
        """Restart ``statistics().max_held`` from the number of leases held now."""
        await self._call(lambda: self._handle.reset_peak.remote())

    def destroy(self) -> None:
        """Kill the scope's actor for good; every holder's permits vanish with it."""
        self._heartbeat.stop()
        _HEARTBEATS.discard((self._name, self._actor_id))
        ray.kill(self._handle, no_restart=True)
        logger.info("semaphore %r destroyed", self._scope, extra=_LOG_EXTRA)

    # -- internals --------------------------------------------------------------------

    async def _check_config_once(self) -> None:
        if self._config_checked:
            return
        permits, ttl_s = await self._call(lambda: self._handle.config.remote())
        if (permits, ttl_s) != (self._permits, self._ttl_s):
            raise SemaphoreConfigConflict(
                f"semaphore {self._scope!r} already exists with permits={permits}, "
                f"ttl_s={ttl_s:g}; asked for permits={self._permits}, ttl_s={self._ttl_s:g}"
            )
        self._config_checked = True

    async def _request(self, lease: Lease, deadline: float | None, owner: Any) -> tuple[Outcome, int]:
        """Ask the actor for ``lease``, retrying the same id across actor restarts."""
        async def submit() -> tuple[Outcome, int]:
            if deadline is None:
                return tuple(await self._handle.acquire.remote(lease.lease_id, lease.holder, lease.limit, None, owner))  # type: ignore[return-value]
            remaining = max(0.0, deadline - time.monotonic())
            ref = self._handle.acquire.remote(lease.lease_id, lease.holder, lease.limit, remaining, owner)
            try:
                # The actor answers by the deadline; the grace only covers a restart in between.
                return tuple(await asyncio.wait_for(ref, remaining + _DEADLINE_GRACE_S))  # type: ignore[return-value]
            except asyncio.TimeoutError:
                return "timeout", 0  # the caller withdraws the request, wherever it is

        return await self._call(submit)

    async def _call(self, submit: Callable[[], Awaitable[_T]]) -> _T:
        """Run one actor call, resubmitting while the actor restarts.

        Raises ``SemaphoreUnavailable`` when the actor is gone for good, or when it stayed
        unreachable for ``max(30, 3 * ttl_s)`` seconds.
        """
        budget = max(30.0, 3 * self._ttl_s)
        first_failure: float | None = None
        attempt = 0
        while True:
            try:
                return await submit()
            except RayActorError as err:
                now = time.monotonic()
                first_failure = now if first_failure is None else first_failure
                gone = await asyncio.to_thread(_actor_gone, self._name, self._actor_id)
                if gone:
                    raise SemaphoreUnavailable(
                        f"semaphore {self._scope!r}: its actor {self._name!r} (namespace "
                        f"{_NAMESPACE!r}) was destroyed or died permanently"
                    ) from err
                if now - first_failure > budget:
                    raise SemaphoreUnavailable(
                        f"semaphore {self._scope!r}: actor {self._name!r} unreachable for "
                        f"{now - first_failure:.1f}s (budget {budget:g}s)"
                    ) from err
                delay = _RETRY_BACKOFF_S[min(attempt, len(_RETRY_BACKOFF_S) - 1)]
                attempt += 1
                logger.info(
                    "semaphore %r: actor unreachable (%s); retrying in %.2fs",
                    self._scope, type(err).__name__, delay, extra=_LOG_EXTRA,
                )
                await asyncio.sleep(delay)

    async def _withdraw(self, lease: Lease) -> None:
        """Make sure ``lease`` holds nothing, even while the calling task is being cancelled.

        The release runs in its own task (shielded), so a second cancellation cannot stop
        it. If the actor is gone, the failure is logged: there is nothing left to leak.
        """
        self._heartbeat.discard(lease.lease_id)
        task = asyncio.ensure_future(self.release(lease))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        try:
            await asyncio.shield(task)
        except SemaphoreUnavailable:
            logger.warning(
                "semaphore %r: could not withdraw lease %s; the actor is gone",
                self._scope, lease.lease_id, exc_info=True, extra=_LOG_EXTRA,
            )
