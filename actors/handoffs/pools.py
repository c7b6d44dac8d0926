"""The driver's side of a handoff: the per-skill pools of subagent replicas.

A pool is ``replicas`` named actors (``soloist:sub:{key}:{skill}:{slot}``) in the ``soloist``
namespace, so every process handing off for the same caller key shares them; a replica
that died is replaced on the next call that needs it, and one that retired (idle for its
grace period, see ``actors.handoffs.replica``) is created again the same way. A
``SkillRegistry``'s key is a digest of what it serves, so two equal registries (a service
building one per request) share one set of replicas.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import random
import threading
from typing import Any

import cloudpickle
import ray
from pydantic import BaseModel, ConfigDict

from actors.agents.managed import AgentConfig
from actors.callers.protocol import DEFAULT_POOL, DEFAULT_RETIRE_AFTER_S, PooledCaller, RetiringPools
from actors.handoffs.replica import create_replica
from cluster.process import Table, WeakIdMap, process_registry

__all__ = ["SubagentPool", "pool_for", "PoolStatistics", "track", "untrack", "retire_after_of"]

_log = logging.getLogger(__name__)


def _nodes_for(num_cpus: float) -> list[str]:
    """The alive nodes that can hold a replica needing ``num_cpus``, in a stable order."""
    return sorted(
        node["NodeID"] for node in ray.nodes()
        if node.get("Alive") and node.get("Resources", {}).get("CPU", 0.0) >= num_cpus
    )


def retire_after_of(caller: Any) -> float:
    """How long ``caller``'s idle replicas stay up (``RetiringPools``, else the default)."""
    return float(caller.retire_after_s) if isinstance(caller, RetiringPools) else DEFAULT_RETIRE_AFTER_S


class PoolStatistics(BaseModel):
    """How a pool is doing, as seen from this process."""

    model_config = ConfigDict(frozen=True)

    name: str
    replicas: int
    calls: int
    replaced: int


class SubagentPool:
    """``replicas`` named subagent actors of one (caller, skill), picked least busy first.

    ``pick`` sends a call to the replica with the fewest calls in flight from this process;
    among those, to the one that finished a call last. Concurrent calls so spread over the
    replicas (a parallel handoff at cap 4 keeps one call on each of four), while calls one
    after another go back to the same replica, whose permit is still warm (kept for
    ``DEFAULT_LINGER_S`` after its body returned): a run loop's next handoff then needs no
    round trip to the semaphore. Round robin sent each call to the replica idle longest.
    A batch's lane stays on one replica while it has calls in flight: its ``Fanout`` (the one
    owner of that binding, see ``actors.handoffs._fanout``) passes the slot to ``pick``.
    Each process starts from its own random slot, so two processes' single calls tend to
    land on different replicas.

    Slot ``i`` is placed on the ``i``-th alive node (round robin, from a random start), not
    left to Ray's ``SPREAD``: that is best effort and, on a busy cluster, puts every replica
    of a pool on one node. A lost replica is re-created on a node alive at that moment.
    """

    def __init__(self, caller: Any, skill: str, *, key: str, replicas: int, num_cpus: float,
                 retire_after_s: float = DEFAULT_RETIRE_AFTER_S) -> None:
        self._caller = caller
        self._skill = skill
        self._name = f"soloist:sub:{key}:{skill}"
        self._key = key
        self._replicas = replicas
        self._num_cpus = num_cpus
        self._retire_after = retire_after_s
        # One handle per replica slot; a slot whose actor died or retired is re-created lazily.
        self._handles: list[Any | None] = [None] * replicas
        self._nodes: list[str] = []  # where slot i goes: _nodes[i % len]; refreshed after a loss
        self._first_node = random.randrange(1 << 16)
        # Per slot: calls in flight from this process, and when it last returned one (a
        # tick of ``_clock``; ties among never-used slots go from this process's start slot).
        self._in_flight = [0] * replicas
        self._start = random.randrange(replicas)
        self._returned = [-((slot - self._start) % replicas) for slot in range(replicas)]
        self._clock = itertools.count(1)
        self._lock = threading.Lock()
        self._calls = 0
        self._replaced = 0
        # Per slot: the runs (orchestrator handles) told that its replica was created; only they
        # hear that it was lost or retired (a run that began tracking later never had it).
        self._told: list[list[Any]] = [[] for _ in range(replicas)]

    @property
    def name(self) -> str:
        return self._name

    def _slot_handle(self, slot: int) -> Any:
        handle = self._handles[slot]
        if handle is None:
            if not self._nodes:
                self._nodes = _nodes_for(self._num_cpus)
            node = self._nodes[(self._first_node + slot) % len(self._nodes)] if self._nodes else None
            handle = create_replica(self._caller, self._skill, name=f"{self._name}:{slot}", num_cpus=self._num_cpus,
                                    node=node, retire_after_s=self._retire_after)
            self._handles[slot] = handle
            self._report(slot, handle, None)  # once per (re-)creation: off the per-call path
        return handle

    def _report(self, slot: int, handle: Any, error: str | None, *, closed: bool = False) -> None:
        """Tell every run that tracks this pool's caller that a replica was created, lost or retired."""
        agent_id = f"{self._name}:{slot}"
        config = AgentConfig(skill=self._skill, replicas=self._replicas, slot=slot, actor_name=agent_id,
                             num_cpus=self._num_cpus)
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

    def pick(self, slot: int | None = None) -> tuple[int, Any]:
        """The replica for the next call: ``slot``'s if given (a lane's), else the one with the
        fewest calls in flight, then the one that returned last.

        Pair every pick with ``returned(slot)`` once the call is over, whatever its outcome.
        """
        with self._lock:
            if slot is None:
                slot = min(range(self._replicas), key=lambda i: (self._in_flight[i], -self._returned[i]))
            handle = self._slot_handle(slot)
            self._in_flight[slot] += 1
            self._calls += 1
            return slot, handle

    def returned(self, slot: int) -> None:
        """The call sent to ``slot`` by ``pick`` is over (answered, failed or cancelled)."""
        with self._lock:
            self._in_flight[slot] -= 1
            self._returned[slot] = next(self._clock)

    def forget(self, slot: int, handle: Any) -> None:
        """Drop a replica whose actor is gone, so the next pick re-creates it."""
        with self._lock:
            if self._handles[slot] is handle:
                self._handles[slot] = None
                self._nodes = []  # its node may be gone: place the new one among the nodes alive then
                self._replaced += 1
                self._report(slot, handle, "the subagent actor was lost; it is replaced on the next call")
                _log.warning("subagent %s:%d is gone; it will be replaced", self._name, slot, extra={"component": "subagent", "skill": self._skill})

    def retired(self, slot: int, handle: Any) -> None:
        """Drop a replica that retired (idle for its grace period): the next pick creates it again."""
        with self._lock:
            if self._handles[slot] is handle:
                self._handles[slot] = None
                self._report(slot, handle, None, closed=True)
                _log.debug("subagent %s:%d retired; it is created again on the next call", self._name, slot,
                           extra={"component": "subagent", "skill": self._skill})

    def handles(self) -> list[Any]:
        with self._lock:
            return [self._slot_handle(i) for i in range(self._replicas)]

    def statistics(self) -> PoolStatistics:
        return PoolStatistics(name=self._name, replicas=self._replicas, calls=self._calls, replaced=self._replaced)


# Every table below lives in the per-process registry (see ``cluster.process``).
# (caller key, skill) -> pool, per Ray session: handles of a previous ``ray.init`` are useless.
_POOLS: Table[tuple[str, str], SubagentPool] = process_registry().subagent_pools
# (caller key, run name) -> orchestrator actor: the runs whose managed-agent records follow
# the replicas this process creates for that caller.
_TRACKERS: Table[tuple[str, str], Any] = process_registry().pool_trackers
# Pool keys of plain callers (a digest of the pickle), weakly held; "" for a ``PooledCaller``,
# whose own ``pool_key`` is read on every call (a registry's changes when a skill is added).
_CALLER_KEYS: WeakIdMap[str] = process_registry().caller_keys


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


def track(caller: Any, run: str, orchestrator_actor: Any) -> None:
    """Record the pool replicas created in this process for ``caller`` as agents of ``run``."""
    _TRACKERS.put((_caller_key(caller), run), orchestrator_actor)


def untrack(run: str) -> None:
    """Stop reporting replicas to ``run`` (it was closed)."""
    _TRACKERS.pop_where(lambda key: key[1] == run)


def _trackers_of(key: str) -> list[Any]:
    return _TRACKERS.select(lambda k: k[0] == key)


def pool_for(caller: Any, skill: str) -> SubagentPool:
    """The (process-wide) pool that serves ``skill`` for ``caller``."""
    key = _caller_key(caller)

    def create() -> SubagentPool:
        replicas, num_cpus = caller.pool_options(skill) if isinstance(caller, PooledCaller) else DEFAULT_POOL
        return SubagentPool(caller, skill, key=key, replicas=replicas, num_cpus=num_cpus,
                            retire_after_s=retire_after_of(caller))

    return _POOLS.get_or_create((key, skill), create)
