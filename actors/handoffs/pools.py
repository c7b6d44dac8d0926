"""Stateless subagent actors and the per-skill pools that spread them over the cluster.

A subagent holds a pickled ``ToolCaller`` and nothing else: no state, no handle to any
orchestrator, not even the run's name. It receives a ``HandoffRequest`` (a tool name, JSON
arguments derived from a snapshot, the scope's id, the cap, the call's timeout) and returns
a ``SubagentReply``. Pools are named actors in the ``soloist`` namespace, so every
process handing off for the same caller shares them; a replica that died is replaced on
the next call that needs it.

The permit follows the work (the safety argument of the cap): the replica that runs a
skill body takes the permit itself, as a lease *guarded* by its own actor, right before the
body starts, and gives it back from the body's own completion, never earlier:
  - a requester that is cancelled, times out or is paused holds no permit, so it neither
    grows the cap nor blocks it past the end of its work;
  - a body that cannot be interrupted (a synchronous skill in a thread) keeps its permit
    until it returns; the timeout error says so;
  - a replica that is paused keeps its permits (its bodies are paused with it and go on
    when it resumes); a replica that dies or is restarted loses them, on Ray's verdict.
So the number of bodies executing never exceeds the number of leases held, which the
semaphore bounds by the cap, whatever is cancelled, timed out, paused or killed.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import cloudpickle
import ray
from pydantic import BaseModel, ConfigDict
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.agents.managed import AgentConfig
from actors.callers.protocol import DEFAULT_POOL, Interruptible, PooledCaller, TextContent, ToolCallResult
from actors.handoffs._lanes import Lanes
from actors.handoffs._permits import WarmPermits, drop_permits, permits_for
from actors.telemetry import subagent_call, subagent_span
from cluster.connect import SOLOIST_NAMESPACE
from cluster.exceptions import SemaphoreUnavailable
from cluster.process import Table, WeakIdMap, process_registry
from cluster.semaphore import held_by_this_process

__all__ = [
    "SubagentActor", "SubagentPool", "pool_for", "PoolStatistics", "create_replica", "track", "untrack",
    "HandoffRequest", "SubagentReply", "interruptible",
]

_log = logging.getLogger(__name__)


class HandoffRequest(BaseModel):
    """One handoff as the subagent receives it: the tool and its JSON arguments, the trace
    context, and what the replica needs to admit the body (the semaphore scope, the cap,
    the call's timeout). Never the run's name, and no handle: nothing here can write.

    It travels as ``wire()``, a list of JSON values, which Ray packs with msgpack (a tuple, or
    the model itself, it pickles: 12 us to send and 9 us to receive on every handoff).
    """

    model_config = ConfigDict(frozen=True)

    skill: str
    arguments: dict[str, Any]
    trace_context: dict[str, str] | None = None
    scope: str
    limit: int
    timeout: float | None = None
    #: Requests of one lane run their bodies one after another on their replica, in arrival
    #: order (see ``actors.handoffs._lanes``); None: the body starts once it has a permit.
    lane: str | None = None
    #: With a lane: this request's id there, by which its driver may withdraw it unstarted.
    ticket: str | None = None

    def wire(self) -> list[Any]:
        """This request as plain values, for ``SubagentActor.handoff_call``."""
        return [self.skill, self.arguments, self.trace_context, self.scope, self.limit, self.timeout, self.lane,
                self.ticket]

    @classmethod
    def of_wire(cls, values: Sequence[Any]) -> HandoffRequest:
        """The request ``wire()`` sent, validated again on arrival."""
        skill, arguments, trace_context, scope, limit, timeout, lane, ticket = values
        return cls(skill=skill, arguments=arguments, trace_context=trace_context, scope=scope, limit=limit,
                   timeout=timeout, lane=lane, ticket=ticket)


class SubagentReply(BaseModel):
    """A handoff call's answer: the tool's result, or that it timed out (and whether its body
    was stopped or runs on, holding its permit until it returns), or that its driver withdrew
    it before it started. It travels as ``wire()``, plain values like the request's."""

    model_config = ConfigDict(frozen=True)

    result: ToolCallResult | None = None
    timed_out: bool = False
    stopped: bool = True
    withdrawn: bool = False
    waited_s: float = 0.0
    node: str = ""

    def wire(self) -> list[Any]:
        """This reply as plain values: the result's text blocks and flags, then the rest."""
        result = self.result
        texts = None if result is None else [block.text for block in result.content]
        return [texts, result is not None and result.is_error, self.timed_out, self.stopped, self.withdrawn,
                self.waited_s, self.node]

    @classmethod
    def of_wire(cls, values: Sequence[Any]) -> SubagentReply:
        """The reply ``wire()`` sent, validated again on arrival."""
        texts, is_error, timed_out, stopped, withdrawn, waited_s, node = values
        result = None if texts is None else ToolCallResult(content=[TextContent(text=text) for text in texts],
                                                           is_error=is_error)
        return cls(result=result, timed_out=timed_out, stopped=stopped, withdrawn=withdrawn, waited_s=waited_s,
                   node=node)


def interruptible(caller: Any, name: str) -> bool:
    """Whether cancelling ``caller``'s tool ``name`` stops its work: True unless the caller
    is ``Interruptible`` and says otherwise (a registry's sync skills say False)."""
    return caller.interruptible(name) if isinstance(caller, Interruptible) else True


class SubagentActor:
    """Runs tool calls for one caller. Stateless: any replica can serve any call."""

    def __init__(self, caller: Any, skill: str) -> None:
        self._caller = caller
        self._skill = skill
        # Bodies whose requester stopped waiting (timeout) but that still run: kept
        # referenced until they return and give their permit back.
        self._orphans: set[asyncio.Future[Any]] = set()
        # This replica's warm permits per scope (the process table's, looked up once; a
        # closed one is looked up again) and its node: off the per-call path.
        self._permits: dict[str, WarmPermits] = {}
        self._node_id: str | None = None
        self._lanes = Lanes()

    def _permits_of(self, scope: str) -> WarmPermits:
        permits = self._permits.get(scope)
        if permits is None or permits.closed:
            permits = permits_for(scope, ray.get_runtime_context().current_actor)
            self._permits[scope] = permits
        return permits

    def _node(self) -> str:
        if self._node_id is None:
            self._node_id = _node()
        return self._node_id

    async def handoff_call(self, wire: Sequence[Any]) -> list[Any]:
        """Take a permit of the request's scope, run the tool, give the permit back once the
        body has returned (see the module docstring). ``wire`` is a ``HandoffRequest.wire()``;
        the answer is a ``SubagentReply.wire()``."""
        return (await self._handoff(HandoffRequest.of_wire(wire))).wire()

    async def _handoff(self, request: HandoffRequest) -> SubagentReply:
        lane = request.lane
        if lane is None:
            return await self._admitted(request)
        # Behind the lane's earlier requests, holding no permit.
        if not await self._lanes.enter(lane, request.ticket or ""):
            return SubagentReply(withdrawn=True, node=self._node())
        try:
            return await self._admitted(request)
        except asyncio.CancelledError:
            # Only a driver cancelling its whole batch cancels a lane's call: the calls waiting
            # behind this one are being cancelled too, and none of them may start meanwhile.
            self._lanes.withdraw_all(lane)
            raise
        finally:
            # After the body's own completion has given its permit back (its done callback
            # runs before this coroutine resumes), so the lane's next body takes it warm.
            self._lanes.leave(lane)

    async def _admitted(self, request: HandoffRequest) -> SubagentReply:
        permits = self._permits_of(request.scope)
        started = time.perf_counter()
        try:
            lease = await permits.take(request.limit)
        except SemaphoreUnavailable:
            drop_permits(request.scope, permits)  # the scope was closed (or re-created): look again once
            permits = self._permits_of(request.scope)
            lease = await permits.take(request.limit)
        waited = time.perf_counter() - started
        work = asyncio.ensure_future(self._run_tool(request.skill, request.arguments, request.trace_context))

        def body_returned(fut: asyncio.Future[Any]) -> None:
            self._orphans.discard(fut)
            permits.give_back(lease, reuse=not fut.cancelled() and fut.exception() is None)

        work.add_done_callback(body_returned)
        try:
            if request.timeout is None:
                # Awaiting the task itself: cancelling this call cancels it (below, too).
                return SubagentReply(result=await work, waited_s=waited, node=self._node())
            # asyncio.wait, not wait_for: a tool that itself raises TimeoutError is its own failure.
            await asyncio.wait({work}, timeout=request.timeout)
        except asyncio.CancelledError:
            work.cancel()  # the body's own completion gives the permit back
            self._orphans.add(work)
            raise
        if not work.done():
            work.cancel()
            self._orphans.add(work)
            return SubagentReply(timed_out=True, stopped=interruptible(self._caller, request.skill), waited_s=waited,
                                 node=self._node())
        return SubagentReply(result=work.result(), waited_s=waited, node=self._node())

    async def withdraw(self, ticket: str) -> bool:
        """Take back a lane's request that has not started (see ``actors.handoffs._lanes``):
        True if it never will; its call then answers ``withdrawn``."""
        return self._lanes.withdraw(ticket)

    async def open_lanes(self) -> int:
        """How many lanes have a request in this replica now (0 once every call is over)."""
        return len(self._lanes)

    async def holds_leases(self, lease_ids: list[str]) -> list[bool]:
        """The semaphore's probe: which of these leases this process still holds."""
        return held_by_this_process(lease_ids)

    async def call(
        self, name: str, arguments: dict[str, Any], trace_context: dict[str, str] | None = None, orchestrator: str = ""
    ) -> ToolCallResult:
        """Run a tool now, outside any cap (benchmarks and tools that drive replicas
        directly); handoffs use ``handoff_call``."""
        # The caller's trace context (so the skill's spans nest under its handoff) and the
        # per-node call count, pushed to the metrics collector by a background thread.
        with subagent_call(name, trace_context, orchestrator) as outcome:
            result = await self._caller.call_tool(name, arguments)
            outcome.tool_error = bool(getattr(result, "is_error", False) or (isinstance(result, dict) and result.get("is_error")))
        return _as_result(result)

    async def _run_tool(self, name: str, arguments: dict[str, Any], trace_context: dict[str, str] | None) -> ToolCallResult:
        with subagent_span(name, trace_context):  # the skill's spans nest under its handoff
            result = await self._caller.call_tool(name, arguments)
        return _as_result(result)

    async def node_id(self) -> str:
        return _node()

    async def ping(self) -> bool:
        return True


def _as_result(result: Any) -> ToolCallResult:
    if isinstance(result, ToolCallResult):
        return result
    return ToolCallResult.model_validate(result if isinstance(result, dict) else result.model_dump())


def _node() -> str:
    return ray.get_runtime_context().get_node_id()


_RemoteSubagent = ray.remote(SubagentActor)

_PLACEMENT_MEMORY_BYTES = 1


def _nodes_for(num_cpus: float) -> list[str]:
    """The alive nodes that can hold a replica needing ``num_cpus``, in a stable order."""
    return sorted(
        node["NodeID"] for node in ray.nodes()
        if node.get("Alive") and node.get("Resources", {}).get("CPU", 0.0) >= num_cpus
    )


def create_replica(caller: Any, skill: str, *, name: str, num_cpus: float, node: str | None = None) -> Any:
    """The named subagent actor ``name`` (joined if it is alive, created otherwise), on
    ``node`` when it is alive and has room there, elsewhere otherwise."""
    if node is None:
        strategy: Any = "SPREAD"
    else:
        strategy = NodeAffinitySchedulingStrategy(node, soft=True, _spill_on_unavailable=True)
    return _RemoteSubagent.options(
        name=name,
        namespace=SOLOIST_NAMESPACE,
        get_if_exists=True,
        num_cpus=num_cpus,
        # Ray places an actor that needs no resources at all on a random node, ignoring a soft
        # affinity. One byte of the (logical) memory resource every node has makes it honour
        # the affinity, and a replica whose node is lost still restarts on another node.
        memory=_PLACEMENT_MEMORY_BYTES,
        scheduling_strategy=strategy,
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
    """``replicas`` named subagent actors of one (caller, skill), picked least busy first.

    ``pick`` sends a call to the replica with the fewest calls in flight from this process;
    among those, to the one that finished a call last. Concurrent calls so spread over the
    replicas (a parallel handoff at cap 4 keeps one call on each of four), while calls one
    after another go back to the same replica, whose permit is still warm (kept for
    ``DEFAULT_LINGER_S`` after its body returned): a run loop's next handoff then needs no
    round trip to the semaphore. Round robin sent each call to the replica idle longest.
    A lane's calls all go to the replica of its first one while any is in flight (that
    replica runs them one after another, see ``actors.handoffs._lanes``).
    Each process starts from its own random slot, so two processes' single calls tend to
    land on different replicas.

    Slot ``i`` is placed on the ``i``-th alive node (round robin, from a random start), not
    left to Ray's ``SPREAD``: that is best effort and, on a busy cluster, puts every replica
    of a pool on one node. A lost replica is re-created on a node alive at that moment.
    """

    def __init__(self, caller: Any, skill: str, *, key: str, replicas: int, num_cpus: float) -> None:
        self._caller = caller
        self._skill = skill
        self._name = f"soloist:sub:{key}:{skill}"
        self._key = key
        self._replicas = replicas
        self._num_cpus = num_cpus
        # One handle per replica slot; a slot whose actor died is re-created lazily.
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
        # Lanes with calls in flight from this process: lane -> (its slot, how many calls).
        self._lanes: dict[str, tuple[int, int]] = {}
        self._calls = 0
        self._replaced = 0

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
                                    node=node)
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

    def pick(self, lane: str | None = None) -> tuple[int, Any]:
        """The replica for the next call: fewest in flight, then the one that returned last;
        for a ``lane`` with a call still in flight here, that call's replica.

        Pair every pick with ``returned(slot, lane)`` once the call is over, whatever its outcome.
        """
        with self._lock:
            held = self._lanes.get(lane) if lane is not None else None
            if held is not None:
                slot = held[0]
                self._lanes[lane] = (slot, held[1] + 1)  # type: ignore[index]
            else:
                slot = min(range(self._replicas), key=lambda i: (self._in_flight[i], -self._returned[i]))
                if lane is not None:
                    self._lanes[lane] = (slot, 1)
            handle = self._slot_handle(slot)
            self._in_flight[slot] += 1
            self._calls += 1
            return slot, handle

    def returned(self, slot: int, lane: str | None = None) -> None:
        """The call sent to ``slot`` by ``pick`` is over (answered, failed or cancelled)."""
        with self._lock:
            self._in_flight[slot] -= 1
            self._returned[slot] = next(self._clock)
            if lane is not None:
                held_slot, calls = self._lanes[lane]
                if calls == 1:
                    del self._lanes[lane]
                else:
                    self._lanes[lane] = (held_slot, calls - 1)

    def forget(self, slot: int, handle: Any) -> None:
        """Drop a replica whose actor is gone, so the next pick re-creates it."""
        with self._lock:
            if self._handles[slot] is handle:
                self._handles[slot] = None
                self._nodes = []  # its node may be gone: place the new one among the nodes alive then
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
_POOLS: Table[tuple[str, str], SubagentPool] = process_registry().subagent_pools
# (caller key, run name) -> orchestrator actor: the runs whose managed-agent records follow
# the replicas this process creates for that caller.
_TRACKERS: Table[tuple[str, str], Any] = process_registry().pool_trackers
# Pool keys of callers (a ``PooledCaller``'s own, else a digest of the pickle), weakly held.
_CALLER_KEYS: WeakIdMap[str] = process_registry().caller_keys


def _caller_key(caller: Any) -> str:
    # Cached per caller object: on the per-handoff path, and ``isinstance`` against a
    # runtime-checkable protocol walks its members on every call.
    key = _CALLER_KEYS.get(caller)
    if key is None:
        if isinstance(caller, PooledCaller):
            key = caller.pool_key
        else:
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
