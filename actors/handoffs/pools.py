"""Stateless subagent actors and the per-skill pools that spread them over the cluster.

A subagent holds a pickled ``ToolCaller`` and nothing else: no state, no handle to any
orchestrator. It receives a tool name and JSON arguments derived from a snapshot and
returns a ``ToolCallResult``. Pools are named actors in the ``soloist`` namespace, so every
process handing off for the same caller shares them; a replica that died is replaced on
the next call that needs it.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
from typing import Any

import cloudpickle
import ray
from pydantic import BaseModel, ConfigDict

from actors.agents.managed import AgentConfig
from actors.callers.protocol import DEFAULT_POOL, PooledCaller, ToolCallResult
from actors.telemetry import subagent_call
from cluster.connect import SOLOIST_NAMESPACE
from cluster.process import Table, WeakIdMap, process_registry

__all__ = ["SubagentActor", "SubagentPool", "pool_for", "PoolStatistics", "create_replica", "track", "untrack"]

_log = logging.getLogger(__name__)


class SubagentActor:
    """Runs tool calls for one caller. Stateless: any replica can serve any call."""

    def __init__(self, caller: Any, skill: str) -> None:
        self._caller = caller
        self._skill = skill

    async def call(
        self, name: str, arguments: dict[str, Any], trace_context: dict[str, str] | None = None, orchestrator: str = ""
    ) -> ToolCallResult:
        # The caller's trace context (so the skill's spans nest under its handoff) and the
        # per-node call count, pushed to the metrics collector by a background thread.
        with subagent_call(name, trace_context, orchestrator) as outcome:
            result = await self._caller.call_tool(name, arguments)
            outcome.tool_error = bool(getattr(result, "is_error", False) or (isinstance(result, dict) and result.get("is_error")))
        if isinstance(result, ToolCallResult):
            return result
        return ToolCallResult.model_validate(result if isinstance(result, dict) else result.model_dump())

    async def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    async def ping(self) -> bool:
        return True


_RemoteSubagent = ray.remote(SubagentActor)


def create_replica(caller: Any, skill: str, *, name: str, num_cpus: float) -> Any:
    """The named subagent actor ``name`` (joined if it is alive, created otherwise)."""
    return _RemoteSubagent.options(
        name=name,
        namespace=SOLOIST_NAMESPACE,
        get_if_exists=True,
        num_cpus=num_cpus,
        scheduling_strategy="SPREAD",
        max_restarts=-1,  # a killed replica comes back for the next call...
        max_task_retries=0,  # ...but the call it was serving fails: no silent re-execution
        max_concurrency=64,
    ).remote(caller, skill)


class PoolStatistics(BaseModel):
    """How a pool is doing, as seen from this process."""

    model_config = ConfigDict(frozen=True)

    name: str
    replicas: int
    calls: int
    replaced: int


class SubagentPool:
    """Round-robin over ``replicas`` named subagent actors of one (caller, skill)."""

    def __init__(self, caller: Any, skill: str, *, key: str, replicas: int, num_cpus: float) -> None:
        self._caller = caller
        self._skill = skill
        self._name = f"soloist:sub:{key}:{skill}"
        self._key = key
        self._replicas = replicas
        self._num_cpus = num_cpus
        # One handle per replica slot; a slot whose actor died is re-created lazily.
        self._handles: list[Any | None] = [None] * replicas
        self._next = itertools.count()
        self._lock = threading.Lock()
        self._calls = 0
        self._replaced = 0

    @property
    def name(self) -> str:
        return self._name

    def _slot_handle(self, slot: int) -> Any:
        handle = self._handles[slot]
        if handle is None:
            handle = create_replica(self._caller, self._skill, name=f"{self._name}:{slot}", num_cpus=self._num_cpus)
            self._handles[slot] = handle
            self._report(slot, handle, None)  # once per (re-)creation: off the per-call path
        return handle

    def _report(self, slot: int, handle: Any, error: str | None) -> None:
        """Tell every run that tracks this pool's caller that a replica was created or lost."""
        agent_id = f"{self._name}:{slot}"
        config = AgentConfig(skill=self._skill, replicas=self._replicas, slot=slot, actor_name=agent_id,
                             num_cpus=self._num_cpus)
        for orchestrator in _trackers_of(self._key):
            # Fire and forget: the orchestrator persists, then publishes, in arrival order.
            if error is None:
                orchestrator.agent_created.remote(agent_id, "subagent", config, handle)
            else:
                orchestrator.agent_changed.remote(agent_id, "error", error)

    def pick(self) -> tuple[int, Any]:
        """The next replica, round robin."""
        with self._lock:
            slot = next(self._next) % self._replicas
            self._calls += 1
            return slot, self._slot_handle(slot)

    def forget(self, slot: int, handle: Any) -> None:
        """Drop a replica whose actor is gone, so the next pick re-creates it."""
        with self._lock:
            if self._handles[slot] is handle:
                self._handles[slot] = None
                self._replaced += 1
                self._report(slot, handle, "the subagent actor was lost; it is replaced on the next call")
                _log.warning("subagent %s:%d is gone; it will be replaced", self._name, slot, extra={"component": "subagent", "skill": self._skill})

    def handles(self) -> list[Any]:
        with self._lock:
            return [self._slot_handle(i) for i in range(self._replicas)]

    def statistics(self) -> PoolStatistics:
        return PoolStatistics(name=self._name, replicas=self._replicas, calls=self._calls, replaced=self._replaced)


# Every table below lives in the per-process registry (see ``cluster.process``).
# (caller key, skill) -> pool, per Ray session: handles of a previous ``ray.init`` are useless.
_POOLS: Table[tuple[str, str], SubagentPool] = process_registry().table("handoffs.subagent_pools", per_session=True)
# (caller key, run name) -> orchestrator actor: the runs whose managed-agent records follow
# the replicas this process creates for that caller.
_TRACKERS: Table[tuple[str, str], Any] = process_registry().table("handoffs.pool_trackers")
# Keys of callers that are not ``PooledCaller``s (a digest of their pickle), weakly held.
_CALLER_KEYS: WeakIdMap[str] = process_registry().weak_id_map("handoffs.caller_keys")


def _caller_key(caller: Any) -> str:
    if isinstance(caller, PooledCaller):
        return caller.pool_key
    key = _CALLER_KEYS.get(caller)
    if key is None:
        key = f"caller-{hashlib.sha1(cloudpickle.dumps(caller)).hexdigest()[:12]}"
        _CALLER_KEYS.put(caller, key)
    return key


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
        return SubagentPool(caller, skill, key=key, replicas=replicas, num_cpus=num_cpus)

    return _POOLS.get_or_create((key, skill), create)
