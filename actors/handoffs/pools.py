"""The driver's side of a handoff: the per-skill pools of subagent replicas, sized by load.

A pool has up to ``max_replicas`` slots; slot ``i`` is the named actor
``soloist:sub:{key}:{skill}:{i}`` in the ``soloist`` namespace, so every process handing off
for the same caller key shares the replicas. A ``SkillRegistry``'s key is a digest of what it
serves, so two equal registries (a service building one per request) share one set.

Sizing (``PoolPolicy``): the pool wants ``ceil(ongoing / target_ongoing_calls)`` replicas,
between ``min_replicas`` and ``max_replicas`` (and what the cluster's nodes can hold), where
``ongoing`` is the calls this process has sent and not had answered plus those waiting for a
replica. Once that want has stood for ``upscale_delay_s`` a grower thread asks the
cluster-wide budget (``cluster.replicas``) for places, oldest request first, and creates the
replicas on the alive nodes that have the skill's resources, a node added since included,
doubling: never more starting at once than have started (one, from zero).
Calls go only to replicas that have answered a ping (started): a new replica's start never
delays a call that a started one can take at once. With no replica started (scale from
zero) a call waits for the first. Shrinking is the replicas' own decision: one that has had
nothing to run or wait for ``downscale_delay_s`` ends itself (``actors.handoffs.replica``),
except the first ``min_replicas`` slots while the pool has users: runs of its caller open in
some process (``track``, until ``untrack``), or calls of its own. Each process renews the
keep of those replicas (``SOLOIST_REPLICA_KEEP_S``, default 60 s) while its pool has users;
once no process does (the runs closed, or their processes ended) they retire like the others
and give their places in the replica budget back. A call that waits for a pool's first
replica while the budget has no place fails after ``SOLOIST_REPLICA_BUDGET_WAIT_S``
(``ReplicaBudgetFull``) instead of waiting forever. A replica that died is created again
when wanted; a call it never ran is sent again, one it ran is never re-run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import hashlib
import itertools
import logging
import math
import os
import random
import threading
import time
from typing import Any, NamedTuple

import cloudpickle
import ray
from pydantic import BaseModel, ConfigDict

from actors.agents.managed import AgentConfig
from actors.callers.policy import PoolPolicy, ReplicaResources, check_cluster_has
from actors.callers.protocol import (DEFAULT_POOL, DEFAULT_RETIRE_AFTER_S, PooledCaller, RetiringPools, ScalingPools,
                                     SharedPools)
from actors.handoffs.replica import ReplicaLoad, create_replica
from cluster.connect import SOLOIST_NAMESPACE
from cluster.metrics.registry import run_closed
from cluster.process import Table, WeakIdMap, process_registry
from cluster.replicas import (acquire_replica_place, budget_full, budget_wait_s, capacity_for, live_replica_names,
                              nodes_for, replica_pool_of)

__all__ = ["SubagentPool", "pool_for", "PoolStatistics", "Picked", "track", "untrack", "retire_after_of",
           "policy_of", "resources_of", "recreate_replica", "PoolStatus", "pool_status", "MAX_TRACKED_RUNS"]

_log = logging.getLogger(__name__)
_LOG_EXTRA = {"component": "subagent"}

#: How long one request to the replica budget waits before the grower looks again at
#: whether the replica is still wanted (it keeps its rank in the queue).
_BUDGET_WAIT_S = 1.0
#: How long a ``min_replicas`` replica stays kept past its last renewal when
#: ``SOLOIST_REPLICA_KEEP_S`` is not set; renewals come three times as often.
DEFAULT_KEEP_S = 60.0


def _keep_s() -> float:
    raw = os.environ.get("SOLOIST_REPLICA_KEEP_S", "").strip()
    try:
        keep = float(raw) if raw else DEFAULT_KEEP_S
    except ValueError:
        keep = math.nan
    if not (math.isfinite(keep) and keep > 0):
        raise ValueError(f"SOLOIST_REPLICA_KEEP_S must be a number of seconds > 0, got {raw!r}")
    return keep


def retire_after_of(caller: Any) -> float:
    """How long ``caller``'s idle replicas stay up (``RetiringPools``, else the default)."""
    return float(caller.retire_after_s) if isinstance(caller, RetiringPools) else DEFAULT_RETIRE_AFTER_S


def _scales(caller: Any) -> bool:
    # PooledCaller first: checking a protocol of methods only (ScalingPools) runs
    # ``issubclass``, which gives a plain caller's class an empty ``__annotations__`` and so
    # changes its pickle, the key of its pool.
    return isinstance(caller, PooledCaller) and isinstance(caller, ScalingPools)


def policy_of(caller: Any, skill: str) -> PoolPolicy:
    """The ``PoolPolicy`` of ``caller``'s pool for ``skill``: its own (``ScalingPools``), else
    up to its ``pool_options`` replicas (``DEFAULT_POOL`` for a plain caller), one call each."""
    if _scales(caller):
        return caller.pool_policy(skill)
    replicas = caller.pool_options(skill)[0] if isinstance(caller, PooledCaller) else DEFAULT_POOL[0]
    return PoolPolicy.up_to(replicas, retire_after_s=retire_after_of(caller))


def resources_of(caller: Any, skill: str) -> ReplicaResources:
    """What each replica of ``caller``'s pool for ``skill`` reserves on its node."""
    if _scales(caller):
        return caller.replica_resources(skill)
    num_cpus = caller.pool_options(skill)[1] if isinstance(caller, PooledCaller) else DEFAULT_POOL[1]
    return ReplicaResources(num_cpus=num_cpus)


class PoolStatistics(BaseModel):
    """How a pool is doing, as seen from this process: its ``max_replicas`` (``replicas``),
    the replicas it holds (``live``) and how many of those have started (``ready``), the calls
    it has in flight (``ongoing``) and those waiting for a replica to start (``waiting``)."""

    model_config = ConfigDict(frozen=True)

    name: str
    replicas: int
    calls: int
    replaced: int
    min_replicas: int = 0
    live: int = 0
    ready: int = 0
    ongoing: int = 0
    waiting: int = 0
    grown: int = 0


class Picked(NamedTuple):
    """The replica a call goes to: its slot, its handle, and how long the call waited for a
    replica to be started (0 when one was)."""

    slot: int
    handle: Any
    waited_s: float


class SubagentPool:
    """The replicas of one (caller, skill), sized by its ``PoolPolicy`` (see the module docstring).

    ``pick`` sends a call to a started replica: one below the policy's target of ongoing
    calls if there is one (the one that finished a call last: its permit is still warm, and
    the others go idle and may retire), else the least busy. A batch's lane stays on one
    replica while it has calls in flight (its ``Fanout`` passes the slot to ``pick``), unless
    the other calls there fill that replica to the target and another started one has room.
    Slot ``i`` is placed on the ``i``-th alive node with room (round robin from a random
    start), not left to Ray's ``SPREAD``, which on a busy cluster puts a whole pool on one node.
    """

    def __init__(self, caller: Any, skill: str, *, key: str, policy: PoolPolicy, resources: ReplicaResources) -> None:
        self._caller = caller
        self._skill = skill
        self._key = key
        self._name = f"soloist:sub:{key}:{skill}"
        self._policy = policy
        self._resources = resources
        self._needs = resources.needs()
        slots = policy.max_replicas
        self._slots = slots
        # Per slot: the replica's handle (None: none now), whether it answered its first ping,
        # and whether a grower is getting it a place and creating it.
        self._handles: list[Any | None] = [None] * slots
        self._ready = [False] * slots
        self._growing = [False] * slots
        self._nodes: list[str] = []
        self._first_node = random.randrange(1 << 16)
        # Per slot: calls in flight from this process, and when it last returned one (a
        # tick of ``_clock``; ties among never-used slots go from this process's start slot).
        self._in_flight = [0] * slots
        start = random.randrange(slots)
        self._returned = [-((slot - start) % slots) for slot in range(slots)]
        self._clock = itertools.count(1)
        # Per slot: when a call last went to it or came back (monotonic). A started replica
        # idle longer than its downscale delay may have retired, which the pool otherwise
        # learns only when a call reaches it: ``pick`` then looks in Ray's table first.
        self._used_at = [time.monotonic()] * slots
        self._looked_at = 0.0
        self._lock = threading.Lock()
        self._calls = 0
        self._replaced = 0
        self._grown = 0
        # Calls waiting for a replica to be started, each on its own future.
        self._waiters: list[concurrent.futures.Future[None]] = []
        # ``start_all`` callers waiting for the next replica to start (not calls: no demand).
        self._starting: list[concurrent.futures.Future[None]] = []
        # Since when (wall clock) the want has exceeded the replicas held: the upscale delay
        # runs from it, and it ranks this pool's requests in the cluster-wide budget.
        self._over_since: float | None = None
        # Since when (monotonic) the grower has waited for a place in the replica budget and
        # not had one (None: it is not waiting): a call waiting for a first replica meanwhile
        # fails once it has waited ``budget_wait_s``.
        self._budget_blocked_since: float | None = None
        self._grower: threading.Thread | None = None
        self._wake = threading.Event()
        # Per slot: the runs told that its replica was created; only they hear that it was
        # lost or retired (a run that began tracking later never had it).
        self._told: list[list[Any]] = [[] for _ in range(slots)]
        with self._lock:
            self._note_demand()  # the min_replicas start now

    @property
    def name(self) -> str:
        return self._name

    @property
    def key(self) -> str:
        """The caller's pool key (the ``pool`` label of the pool's metrics)."""
        return self._key

    @property
    def policy(self) -> PoolPolicy:
        return self._policy

    # ------------------------------------------------------------ sizing (under _lock)

    def _held(self) -> int:
        return sum(1 for slot in range(self._slots) if self._handles[slot] is not None or self._growing[slot])

    def _wanted(self) -> int:
        ongoing = sum(self._in_flight) + len(self._waiters)
        wanted = math.ceil(ongoing / self._policy.target_ongoing_calls)
        return max(self._policy.min_replicas if self._has_users(ongoing) else 0, min(wanted, self._slots))

    def _has_users(self, ongoing: int) -> bool:
        """Whether this process uses the pool: a run of its caller is open here (tracked), or
        a call of the pool is in flight or waiting. Without users it keeps no ``min_replicas``."""
        return ongoing > 0 or bool(_trackers_of(self._key))

    def _note_demand(self) -> None:
        """Wake the grower when more replicas are wanted than held."""
        if self._wanted() > self._held():
            if self._over_since is None:
                self._over_since = time.time()
            if self._grower is None:
                self._grower = threading.Thread(target=self._grow, name=f"soloist-grow-{self._skill}", daemon=True)
                self._grower.start()
            self._wake.set()
        else:
            self._over_since = None

    # ------------------------------------------------------------ growing (the grower thread)

    def _grow(self) -> None:
        """Create wanted replicas until none are missing, then end (a new want starts another)."""
        try:
            while True:
                with self._lock:
                    missing = self._wanted() - self._held()
                    if missing <= 0:
                        self._over_since = None
                        self._grower = None
                        return
                    since = self._over_since if self._over_since is not None else time.time()
                    # Up to min_replicas, and from zero (a call waits for it), it grows at once.
                    delayed = self._held() >= max(1, self._policy.min_replicas)
                    due = since + (self._policy.upscale_delay_s if delayed else 0.0)
                    self._wake.clear()
                if time.time() < due:
                    self._wake.wait(due - time.time())
                    continue
                self._grow_one(since)
        except BaseException:
            with self._lock:
                self._grower = None
            _log.exception("growing pool %s failed", self._name, extra=_LOG_EXTRA)
            raise

    def _grow_one(self, since: float) -> None:
        capacity = capacity_for(self._needs)  # asks Ray: not under the lock every pick takes
        with self._lock:
            free = [slot for slot in range(self._slots) if self._handles[slot] is None and not self._growing[slot]]
            ready = sum(self._ready)
            # Doubling: at most as many replicas starting as have started (one from zero). A
            # process start costs a core for about a second; a storm of them on a small node
            # slows the very burst they are meant to serve, and replicas started one round
            # earlier serve calls sooner than a batch that starts all at once.
            starting = self._held() - ready
            if not free or starting >= max(1, ready) or (capacity is not None and self._held() >= capacity):
                self._wake.clear()
                wait = True
            else:
                slot, wait = free[0], False
                self._growing[slot] = True
        if wait:  # every slot held, the nodes full or enough starting: look again when something changes
            self._wake.wait(1.0)
            return
        name = f"{self._name}:{slot}"
        try:
            while not acquire_replica_place(name, since, _BUDGET_WAIT_S):
                with self._lock:
                    if self._budget_blocked_since is None:
                        self._budget_blocked_since = time.monotonic()
                    if self._wanted() <= self._held() - 1:  # no longer wanted: give the slot back
                        self._growing[slot] = False
                        return
            with self._lock:
                self._budget_blocked_since = None
            self._create(slot)
        finally:
            with self._lock:
                self._growing[slot] = False
                if not any(self._growing):
                    self._budget_blocked_since = None

    def _create(self, slot: int) -> Any:
        """Create (or join) slot ``slot``'s replica and watch for its first answer."""
        if not self._nodes:
            self._nodes = nodes_for(self._needs)
        node = self._nodes[(self._first_node + slot) % len(self._nodes)] if self._nodes else None
        keep = slot < self._policy.min_replicas
        handle = create_replica(self._caller, self._skill, name=f"{self._name}:{slot}", resources=self._resources,
                                node=node, retire_after_s=self._policy.downscale_delay_s,
                                kept_s=_keep_s() if keep else 0.0, pool=self._key)
        if keep:
            _start_keeper()
        with self._lock:
            self._handles[slot] = handle
            self._ready[slot] = False
            self._grown += 1
            self._nodes = []  # the next growth places among the nodes alive then (a new one included)
            self._report(slot, handle, None)
        handle.ping.remote().future().add_done_callback(lambda done: self._started(slot, handle, done))
        return handle

    def _started(self, slot: int, handle: Any, done: concurrent.futures.Future[Any]) -> None:
        """The first ping of a new replica was answered (or failed: it is gone)."""
        if done.exception() is not None:
            self.forget(slot, handle)
            return
        with self._lock:
            if self._handles[slot] is not handle:
                return
            self._ready[slot] = True
            self._wake.set()  # the grower may start the next ones
            waiters, self._waiters = self._waiters + self._starting, []
            self._starting = []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # ------------------------------------------------------------ calls

    def _choose(self, wanted: int | None, own: int) -> int | None:
        ready = [slot for slot in range(self._slots) if self._ready[slot]]
        if not ready:
            return None
        target = self._policy.target_ongoing_calls
        best = min(ready, key=lambda i: (self._in_flight[i] >= target,
                                          self._in_flight[i] if self._in_flight[i] >= target else -self._returned[i]))
        if wanted is not None and self._ready[wanted]:
            # A lane stays on its replica unless the other calls there fill it to the target
            # and another started replica has room: then it moves, so replicas grown while a
            # batch runs take some of its lanes.
            crowded = self._in_flight[wanted] - own >= target and self._in_flight[best] < target
            return best if crowded else wanted
        return best

    async def pick(self, slot: int | None = None, own: int = 0) -> Picked:
        """The replica for the next call: ``slot``'s if given and started (a lane's, which has
        ``own`` calls in flight there), unless it is crowded; else as the class docstring
        says; waits for a replica to start if none has.

        Pair every pick with ``returned(slot)`` once the call is over, whatever its outcome.
        """
        began = time.perf_counter()
        if self._maybe_retired():
            await self._look_in_ray()
        waiting_since = time.monotonic()
        while True:
            with self._lock:
                chosen = self._choose(slot, own)
                if chosen is not None:
                    self._used_at[chosen] = time.monotonic()
                    self._in_flight[chosen] += 1
                    self._calls += 1
                    self._note_demand()
                    handle = self._handles[chosen]
                    return Picked(chosen, handle, time.perf_counter() - began)
                waiter: concurrent.futures.Future[None] = concurrent.futures.Future()
                self._waiters.append(waiter)
                self._note_demand()
            try:
                await asyncio.wait_for(asyncio.wrap_future(waiter), 1.0)
            except TimeoutError:
                waited = time.monotonic() - waiting_since
                if self._starved(waited):
                    raise await asyncio.to_thread(budget_full, self._name, self._skill, waited) from None
            finally:
                with self._lock:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)

    def _starved(self, waited_s: float) -> bool:
        """Whether a call that has waited ``waited_s`` for a first replica gives up: no replica
        started, and the grower waits for a place in the budget that does not come."""
        with self._lock:
            return (not any(self._ready) and self._budget_blocked_since is not None
                    and waited_s >= budget_wait_s())

    def _idle_past_delay(self) -> list[int]:
        """Started replicas (not kept by ``min_replicas``) idle past their downscale delay:
        they may have retired, which the pool otherwise learns only when a call reaches them."""
        now = time.monotonic()
        delay = self._policy.downscale_delay_s
        with self._lock:
            # ``min_replicas`` too: they retire once the pool has no users anywhere.
            return [slot for slot in range(self._slots)
                    if self._ready[slot] and self._in_flight[slot] == 0 and now - self._used_at[slot] > delay]

    def _maybe_retired(self) -> bool:
        """Whether to look in Ray's table before this pick: once per idle spell at most."""
        return time.monotonic() - self._looked_at > self._policy.downscale_delay_s and bool(self._idle_past_delay())

    async def _look_in_ray(self) -> None:
        """Drop the replicas idle past their delay that Ray no longer lists, so neither calls
        nor the pool's growth count on them."""
        self._looked_at = time.monotonic()
        live = await asyncio.to_thread(live_replica_names)
        for slot in self._idle_past_delay():
            handle = self._handles[slot]
            if handle is not None and f"{self._name}:{slot}" not in live:
                self.retired(slot, handle)

    def returned(self, slot: int) -> None:
        """The call sent to ``slot`` by ``pick`` is over (answered, failed or cancelled)."""
        with self._lock:
            self._used_at[slot] = time.monotonic()
            self._in_flight[slot] -= 1
            self._returned[slot] = next(self._clock)

    def forget(self, slot: int, handle: Any) -> None:
        """Drop a replica whose actor is gone, so a new one is created when wanted."""
        with self._lock:
            if self._handles[slot] is handle:
                self._drop(slot)
                self._replaced += 1
                self._report(slot, handle, "the subagent actor was lost; it is replaced on the next call")
                _log.warning("subagent %s:%d is gone; it will be replaced", self._name, slot,
                             extra={**_LOG_EXTRA, "skill": self._skill})
                self._note_demand()

    def retired(self, slot: int, handle: Any) -> None:
        """Drop a replica that retired (idle for its grace period): one is created again when wanted."""
        with self._lock:
            if self._handles[slot] is handle:
                self._drop(slot)
                self._report(slot, handle, None, closed=True)
                _log.debug("subagent %s:%d retired", self._name, slot, extra={**_LOG_EXTRA, "skill": self._skill})
                self._note_demand()

    def _drop(self, slot: int) -> None:
        self._handles[slot] = None
        self._ready[slot] = False
        starting, self._starting = self._starting, []
        for waiter in starting:  # ``start_all`` looks again (this one will not start)
            if not waiter.done():
                waiter.set_result(None)
        self._nodes = []  # its node may be gone: place the next one among the nodes alive then

    def _report(self, slot: int, handle: Any, error: str | None, *, closed: bool = False) -> None:
        """Tell every run that tracks this pool's caller that a replica was created, lost or retired."""
        agent_id = f"{self._name}:{slot}"
        config = AgentConfig(skill=self._skill, replicas=self._slots, slot=slot, actor_name=agent_id,
                             num_cpus=self._resources.num_cpus)
        trackers = _trackers_of(self._key)
        if not closed and error is None:
            self._told[slot] = trackers
        else:
            trackers, self._told[slot] = [t for t in trackers if t in self._told[slot]], []
        for orchestrator in trackers:
            # Fire and forget: the orchestrator persists, then publishes, in arrival order.
            if closed:
                orchestrator.agent_changed.remote(agent_id, "closed", None)
            elif error is None:
                orchestrator.agent_created.remote(agent_id, "subagent", config, handle)
            else:
                orchestrator.agent_changed.remote(agent_id, "error", error)

    def keep_warm(self) -> int:
        """Renew the keep of this pool's ``min_replicas`` replicas while it has users in this
        process (see the module docstring); returns how many were asked."""
        with self._lock:
            if not self._has_users(sum(self._in_flight) + len(self._waiters)):
                return 0
            kept = [handle for handle in self._handles[:self._policy.min_replicas] if handle is not None]
        for_s = _keep_s()
        for handle in kept:  # fire and forget: a replica gone meanwhile is the pool's next call's concern
            handle.keep.remote(for_s).future().add_done_callback(_outcome_ignored)
        return len(kept)

    def handles(self) -> list[Any]:
        """Every slot's replica, created now where missing (each through the budget): the
        pool at its max, started ahead of a burst (a benchmark's fixed pool, a test's).
        ``ReplicaBudgetFull`` when a place does not come within ``budget_wait_s``."""
        since = time.time()
        for slot in range(self._slots):
            with self._lock:
                if self._handles[slot] is not None or self._growing[slot]:
                    continue
                self._growing[slot] = True
            try:
                began, limit_s = time.monotonic(), budget_wait_s()
                while not acquire_replica_place(f"{self._name}:{slot}", since, _BUDGET_WAIT_S):
                    if time.monotonic() - began >= limit_s:
                        raise budget_full(self._name, self._skill, time.monotonic() - began)
                self._create(slot)
            finally:
                with self._lock:
                    self._growing[slot] = False
        with self._lock:
            return [handle for handle in self._handles if handle is not None]

    async def start_all(self) -> list[Any]:
        """``handles()``, then wait until every one of them has started (calls go to it)."""
        handles = await asyncio.to_thread(self.handles)
        while True:
            with self._lock:
                if all(self._ready[slot] or self._handles[slot] is None for slot in range(self._slots)):
                    return handles
                waiter: concurrent.futures.Future[None] = concurrent.futures.Future()
                self._starting.append(waiter)
            await asyncio.wrap_future(waiter)

    def users_changed(self) -> None:
        """A run of this pool's caller opened here: its ``min_replicas`` are wanted again."""
        with self._lock:
            self._note_demand()

    def statistics(self) -> PoolStatistics:
        with self._lock:
            return PoolStatistics(
                name=self._name, replicas=self._slots, calls=self._calls, replaced=self._replaced,
                min_replicas=self._policy.min_replicas, live=sum(h is not None for h in self._handles),
                ready=sum(self._ready), ongoing=sum(self._in_flight), waiting=len(self._waiters), grown=self._grown)


# Every table below lives in the per-process registry (see ``cluster.process``).
# (caller key, skill) -> pool, per Ray session: handles of a previous ``ray.init`` are useless.
_POOLS: Table[tuple[str, str], SubagentPool] = process_registry().subagent_pools
# (caller key, run name) -> orchestrator actor: the runs whose managed-agent records follow
# the replicas this process creates for that caller.
_TRACKERS: Table[tuple[str, str], Any] = process_registry().pool_trackers
# Pool keys of plain callers (a digest of the pickle), weakly held; "" for a ``PooledCaller``,
# whose own ``pool_key`` is read on every call (a registry's changes when a skill is added).
_CALLER_KEYS: WeakIdMap[str] = process_registry().caller_keys


def _outcome_ignored(done: concurrent.futures.Future[Any]) -> None:
    done.exception()  # read, so Ray does not report an unhandled error for a replica gone


_KEEPER_LOCK = threading.Lock()
_KEEPER: list[threading.Thread] = []  # the process's one keeper thread, once started


def _start_keeper() -> None:
    """Start this process's keeper thread once: it renews the keep of the ``min_replicas``
    replicas of every pool here that has users, three times per keep."""
    with _KEEPER_LOCK:
        if _KEEPER and _KEEPER[0].is_alive():
            return
        thread = threading.Thread(target=_keep_warm_forever, name="soloist-replica-keeper", daemon=True)
        _KEEPER[:] = [thread]
        thread.start()


_KEEPER_TICK_S = 0.5  # how often the keeper looks whether a renewal is due


def _keep_warm_forever() -> None:
    # Renewals are due a third of the keep after the last one, the keep read at each tick: read
    # once per round, a keeper started under the 60 s default slept 20 s between renewals, and
    # a shorter keep set later in the process lapsed meanwhile (its replicas retired in use).
    renewed = time.monotonic()
    while True:
        time.sleep(_KEEPER_TICK_S)
        try:
            period = _keep_s() / 3
        except ValueError:  # said where the keep is set (a replica's creation); renew as by default
            period = DEFAULT_KEEP_S / 3
        if time.monotonic() - renewed < period:
            continue
        renewed = time.monotonic()
        try:
            if not ray.is_initialized():
                continue
            for pool in _POOLS.select(lambda _key: True):
                pool.keep_warm()
        except Exception as exc:  # the next round tries again; a keep that lapses only retires a replica early
            _log.warning("renewing the keep of min_replicas replicas failed: %s", exc, extra=_LOG_EXTRA)


def _caller_key(caller: Any) -> str:
    # Cached per caller object: on the per-handoff path, and ``isinstance`` against a
    # runtime-checkable protocol walks its members on every call.
    key = _CALLER_KEYS.get(caller)
    if key is None:
        if isinstance(caller, PooledCaller):
            key = ""
        else:
            key = f"caller-{hashlib.sha1(cloudpickle.dumps(caller)).hexdigest()[:12]}"
        _CALLER_KEYS.put(caller, key)
    return key or caller.pool_key


#: Runs of one caller that get its pools' replicas as managed-agent records. A pool is shared:
#: recording each replica in every run that shares it costs a store write per run and replica
#: (40,000 for 10,000 runs on a pool of 4); past this many runs, ``pool_status()`` (and
#: ``soloist status``) is where the pool's replicas are seen.
MAX_TRACKED_RUNS = 64


def track(caller: Any, run: str, orchestrator_actor: Any) -> None:
    """Record the pool replicas created in this process for ``caller`` as agents of ``run``
    (for the first ``MAX_TRACKED_RUNS`` runs of the caller open in this process)."""
    key = _caller_key(caller)
    if _TRACKERS.get((key, run)) is None and len(_trackers_of(key)) >= MAX_TRACKED_RUNS:
        return
    _TRACKERS.put((key, run), orchestrator_actor)
    for pool in _POOLS.select(lambda pool_key: pool_key[0] == key):
        pool.users_changed()  # its min_replicas are wanted again


def untrack(run: str) -> None:
    """Stop reporting replicas to ``run`` (it was closed), and let its metric series go."""
    _TRACKERS.pop_where(lambda key: key[1] == run)
    run_closed(run)


def _trackers_of(key: str) -> list[Any]:
    return _TRACKERS.select(lambda k: k[0] == key)


def recreate_replica(caller: Any, skill: str, *, name: str) -> Any:
    """Replica ``name`` (``soloist:sub:{key}:{skill}:{slot}``) of ``caller``'s pool for
    ``skill``, joined or created as its pool would create it (the managed-agent registry's
    way back to a recorded subagent)."""
    policy = policy_of(caller, skill)
    key, slot = name.split(":")[2], int(name.rsplit(":", 1)[1])
    keep = slot < policy.min_replicas
    if keep:
        _start_keeper()
    return create_replica(caller, skill, name=name, resources=resources_of(caller, skill), pool=key,
                          retire_after_s=policy.downscale_delay_s, kept_s=_keep_s() if keep else 0.0)


class PoolStatus(BaseModel):
    """One pool across the cluster, read from its replicas (``soloist status``, the runs page):
    the replicas up now, the bodies they run, the calls waiting in their lanes or for a
    permit, and the median wait before a body started over their last calls."""

    model_config = ConfigDict(frozen=True)

    pool: str
    skill: str
    replicas: int
    running: int
    waiting: int
    queue_wait_p50_s: float
    nodes: list[str]
    scopes: int = 0
    """Semaphore scopes whose permits its replicas keep (summed): bounded by the runs they
    served lately, not by every run they ever served."""


async def _load_of(name: str, timeout: float) -> ReplicaLoad | None:
    try:
        handle = ray.get_actor(name, namespace=SOLOIST_NAMESPACE)
        return await asyncio.wait_for(asyncio.wrap_future(handle.load.remote().future()), timeout)
    except (ValueError, TimeoutError, ray.exceptions.RayError):
        return None  # it retired (or is retiring) between the listing and the call


async def pool_status(timeout: float = 5.0) -> list[PoolStatus]:
    """Every pool with a replica up in the cluster, from Ray's table and each replica's ``load()``
    (a replica that retired meanwhile is left out), sorted by skill."""
    names = sorted(live_replica_names())
    loads = await asyncio.gather(*[_load_of(name, timeout) for name in names])
    grouped: dict[tuple[str, str], list[ReplicaLoad]] = {}
    for name, load in zip(names, loads):
        parsed = replica_pool_of(name)
        if parsed is not None and load is not None:
            grouped.setdefault(parsed, []).append(load)
    out = []
    for (key, skill), replicas in grouped.items():
        waits = sorted(load.queue_wait_p50_s for load in replicas)
        out.append(PoolStatus(pool=key, skill=skill, replicas=len(replicas), running=sum(r.running for r in replicas),
                              waiting=sum(r.waiting for r in replicas), queue_wait_p50_s=waits[len(waits) // 2],
                              nodes=sorted({r.node for r in replicas}), scopes=sum(r.scopes for r in replicas)))
    return sorted(out, key=lambda status: (status.skill, status.pool))


@functools.lru_cache(maxsize=64)
def _shares_pools(cls: type) -> bool:
    # Per class, once: a protocol check walks its members on every call. Asked only of a
    # ``PooledCaller``'s class: on a plain caller's it would change the pickle of its key.
    return issubclass(cls, SharedPools)


def _group_of(caller: Any, skill: str) -> str:
    """The name of the pool that serves ``skill``: its own, or the one its caller puts it in
    (``SharedPools``: every tool of one MCP server goes to one pool)."""
    cached = _CALLER_KEYS.get(caller)  # "" for a PooledCaller once ``_caller_key`` has run
    pooled = cached == "" if cached is not None else isinstance(caller, PooledCaller)
    cls: type = type(caller)
    return caller.pool_group(skill) if pooled and _shares_pools(cls) else skill


def pool_for(caller: Any, skill: str) -> SubagentPool:
    """The (process-wide) pool that serves ``skill`` for ``caller``: the skill's own, or the
    one its caller groups it into (``SharedPools``), whose policy and resources are those of
    the skill that created it.

    Raises ``PoolConfigError`` (creating nothing) when no node can hold one of its replicas.
    """
    key = _caller_key(caller)
    group = _group_of(caller, skill)
    pool = _POOLS.get((key, group))
    if pool is not None:
        return pool
    resources = resources_of(caller, skill)
    check_cluster_has(skill, resources)  # before the table's lock: it asks Ray
    return _POOLS.get_or_create(
        (key, group), lambda: SubagentPool(caller, group, key=key, policy=policy_of(caller, skill), resources=resources))
