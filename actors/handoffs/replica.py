"""The replica side of a handoff: the stateless ``SubagentActor`` and its wire records.

A subagent holds a pickled ``ToolCaller`` and nothing else: no state, no handle to any
orchestrator, not even the run's name. It receives a ``HandoffRequest`` (a tool name, JSON
arguments derived from a snapshot, the scope's id, the cap, the call's timeout) and returns
a ``SubagentReply``. The driver's side (the pools that pick a replica) is
``actors.handoffs.pools``.

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

Usage: a body runs with a fresh ``UsageMeter`` (``cluster.semaphore.metered``); what its
model calls report there (``report_usage``, or a ``ModelEndpoint.call``) settles the
permit's charge when the scope has a budget, and travels back in the reply (``usage``), so
the run records the tokens of each handoff.

Retirement: a replica that has run nothing, has nothing waiting in its lanes and no body
left over (orphans) for ``retire_after_s`` seconds ends itself (``ray.actor.exit_actor``),
so a pool no run uses stops costing a process. One of its pool's ``min_replicas`` is also
*kept*: not before its keep has run out, which every process whose pool has users renews
(``keep``); once no process does (their runs closed, or the processes ended), it retires
like the others. It decides on its own event loop, where
every call enters: once it has decided, a call that reaches it is answered ``retired``
without running, and a call sent after it exited fails with Ray's *intended exit* death
cause, which ``retired_exit`` recognises. Either way the call never ran, and the driver
sends it again to a re-created replica. No call is lost, none runs twice, and it works
when no driver is left to decide anything.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, NamedTuple

import ray
from pydantic import BaseModel, ConfigDict
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.callers.policy import ReplicaResources
from actors.callers.protocol import DEFAULT_RETIRE_AFTER_S, Interruptible, TextContent, ToolCallResult
from actors.handoffs._lanes import Lanes
from actors.handoffs._permits import (
    FORGET_AFTER_S,
    WarmPermits,
    close_all_permits,
    drop_permits,
    forget_unused_permits,
    joined_permits,
)
from actors.telemetry import subagent_span
from cluster import metrics
from cluster.connect import SOLOIST_NAMESPACE, actor_was_restarted
from cluster.exceptions import SemaphoreUnavailable
from cluster.heap import freeze_startup_objects, give_back_freed_memory
from cluster.semaphore import TokenUsage, held_by_this_process, metered, renew_held_leases

__all__ = [
    "SubagentActor", "HandoffRequest", "SubagentReply", "RequestWire", "ReplyWire", "interruptible",
    "create_replica", "retired_exit", "ReplicaLoad", "FIRST_CALL_GRACE_S",
]

#: The least a replica that has not yet served a call waits before it retires.
FIRST_CALL_GRACE_S = 2.0


#: Ray's words for an actor that ended itself with ``exit_actor`` (a replica retiring), as
#: opposed to one killed (``ray.kill``), crashed or lost with its node: in the death cause
#: (``ActorDiedError``), or in the "unavailable" error of a call that met the exit under way,
#: whose detail is either of the last two, depending on how far the exit had got.
_INTENDED_EXIT = ("INTENDED_USER_EXIT", "exit_actor() is called", "User requested to exit the actor")


class RequestWire(NamedTuple):
    """A ``HandoffRequest`` on the wire: plain values in this order (Ray packs a list of
    JSON values with msgpack; a tuple or the model itself it pickles, 12 us to send and 9 us
    to receive on every handoff). The one statement of the order: both ends read it here."""

    skill: str
    arguments: dict[str, Any]
    trace_context: dict[str, str] | None
    scope: str
    limit: int
    timeout: float | None
    lane: str | None
    ticket: str | None


class ReplyWire(NamedTuple):
    """A ``SubagentReply`` on the wire: the result's text blocks and error flag, then the rest."""

    texts: list[str] | None
    is_error: bool
    timed_out: bool
    stopped: bool
    withdrawn: bool
    retired: bool
    waited_s: float
    queued_s: float
    node: str
    #: ``(model, input tokens, output tokens, requests)`` the body reported, or None.
    usage: tuple[str, int, int, int] | None = None


class HandoffRequest(BaseModel):
    """One handoff as the subagent receives it: the tool and its JSON arguments, the trace
    context, and what the replica needs to admit the body (the semaphore scope, the cap,
    the call's timeout). Never the run's name, and no handle: nothing here can write.
    It travels as ``wire()`` (a ``RequestWire``'s values)."""

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
        return [getattr(self, field) for field in RequestWire._fields]

    @classmethod
    def of_wire(cls, values: Sequence[Any]) -> HandoffRequest:
        """The request ``wire()`` sent, validated again on arrival."""
        return cls(**RequestWire(*values)._asdict())


class ReplicaLoad(BaseModel):
    """One replica's work now: bodies running, calls waiting (in a lane or for a permit),
    calls served since it started, the median wait of its last calls before their bodies
    started, its idle grace (None: it never retires) and its node."""

    model_config = ConfigDict(frozen=True)

    running: int
    waiting: int
    served: int
    queue_wait_p50_s: float
    retire_after_s: float | None
    node: str
    scopes: int = 0
    """Semaphore scopes whose permits it keeps: those of the runs it served in the last
    ``FORGET_AFTER_S`` seconds (or holds a lease of), never every run it ever served."""


class SubagentReply(BaseModel):
    """A handoff call's answer: the tool's result, or that it timed out (and whether its body
    was stopped or runs on, holding its permit until it returns), or that it did not run:
    its driver withdrew it before it started (``withdrawn``), or the replica was retiring
    (``retired``). It travels as ``wire()`` (a ``ReplyWire``'s values)."""

    model_config = ConfigDict(frozen=True)

    result: ToolCallResult | None = None
    timed_out: bool = False
    stopped: bool = True
    withdrawn: bool = False
    retired: bool = False
    #: Seconds the body waited for its permit (the semaphore's share of ``queued_s``).
    waited_s: float = 0.0
    #: Seconds from the call's arrival here to its body's start: its lane, then its permit.
    queued_s: float = 0.0
    node: str = ""
    #: The token usage the body's model calls reported (None: none reported, or not returned yet).
    usage: TokenUsage | None = None

    @property
    def ran(self) -> bool:
        """False when the call never started here (withdrawn, or refused by a retiring replica)."""
        return not (self.withdrawn or self.retired)

    def wire(self) -> list[Any]:
        """This reply as plain values (a ``ReplyWire``)."""
        result = self.result
        usage = self.usage
        return list(ReplyWire(
            texts=None if result is None else [block.text for block in result.content],
            is_error=result is not None and result.is_error,
            timed_out=self.timed_out, stopped=self.stopped, withdrawn=self.withdrawn, retired=self.retired,
            waited_s=self.waited_s, queued_s=self.queued_s, node=self.node,
            usage=None if usage is None else (usage.model, usage.input_tokens, usage.output_tokens, usage.requests),
        ))

    @classmethod
    def of_wire(cls, values: Sequence[Any]) -> SubagentReply:
        """The reply ``wire()`` sent, validated again on arrival."""
        wire = ReplyWire(*values)
        result = None if wire.texts is None else ToolCallResult(
            content=[TextContent(text=text) for text in wire.texts], is_error=wire.is_error)
        usage = None if wire.usage is None else TokenUsage(
            model=wire.usage[0], input_tokens=wire.usage[1], output_tokens=wire.usage[2], requests=wire.usage[3])
        return cls(result=result, timed_out=wire.timed_out, stopped=wire.stopped, withdrawn=wire.withdrawn,
                   retired=wire.retired, waited_s=wire.waited_s, queued_s=wire.queued_s, node=wire.node, usage=usage)


def interruptible(caller: Any, name: str) -> bool:
    """Whether cancelling ``caller``'s tool ``name`` stops its work: True unless the caller
    is ``Interruptible`` and says otherwise (a registry's sync skills say False)."""
    return caller.interruptible(name) if isinstance(caller, Interruptible) else True


def retired_exit(error: BaseException) -> bool:
    """Whether ``error`` (of a call to a replica) says the replica had ended itself: it
    retired, so the call never ran there. A replica exits only with nothing running or
    waiting, after refusing unrun every call that reached it since it decided (Ray's
    "may or may not have been executed" cannot apply: nothing was executing)."""
    if not isinstance(error, (ray.exceptions.ActorDiedError, ray.exceptions.ActorUnavailableError)):
        return False
    text = str(error)
    return any(marker in text for marker in _INTENDED_EXIT)


class SubagentActor:
    """Runs tool calls for one caller. Stateless: any replica can serve any call.

    Retires once idle for ``retire_after_s`` (see the module docstring).
    """

    def __init__(self, caller: Any, skill: str, retire_after_s: float = DEFAULT_RETIRE_AFTER_S, pool: str = "",
                 kept_s: float = 0.0) -> None:
        self._caller = caller
        self._skill = skill
        self._pool = pool
        # Bodies whose requester stopped waiting (timeout) but that still run: kept
        # referenced until they return and give their permit back.
        self._orphans: set[asyncio.Future[Any]] = set()
        # This replica's warm permits per scope (the process table's, looked up once; a
        # closed one is looked up again) and its node: off the per-call path.
        self._permits: dict[str, WarmPermits] = {}
        self._forgetting: asyncio.TimerHandle | None = None  # the next pass forgetting unused scopes' permits
        self._node_id: str | None = None
        self._handle: Any = None  # this replica's own handle, once looked up
        self._lanes = Lanes()
        # inf: never retires (a replica created so by an earlier version, or by hand).
        self._retire_after = max(0.0, float(retire_after_s))
        # One of its pool's ``min_replicas``: it does not retire before this (monotonic), which
        # ``keep`` moves on while some process's pool has users.
        self._kept_until = time.monotonic() + max(0.0, float(kept_s))
        # Until it has served a call, it waits at least ``FIRST_CALL_GRACE_S``: a replica grown
        # for a burst must not end before the calls meant for it reach it.
        self._served = 0
        # The last calls' waits from arrival to body start (``load()``), newest last.
        self._queued: deque[float] = deque(maxlen=64)
        self._running = 0
        # Calls inside handoff_call now (waiting in a lane, for a permit, or running), and
        # when the last one entered or left: the replica is idle when both say so.
        self._active = 0
        self._last_activity = time.monotonic()
        # Set once, on the event loop, by the retirement that ends this replica: from then
        # on every call is refused unrun.
        self._retiring = False
        self._idle_watch: asyncio.Task[None] | None = None
        self._call_ended = asyncio.Event()  # wakes the idle watch
        if not actor_was_restarted():
            # Names its pool to the replica gauge, which the endpoint reads from Ray's table
            # (so a pool that shrank to zero shows 0, and a killed replica is not counted).
            metrics.add_replicas(pool, skill, 1)
        else:
            # Ray restarted it (its process died): no creator sends it a first call, and its idle
            # watch starts with one, so it sends itself one; otherwise, if no call ever reaches
            # it again, it would never retire.
            ray.get_runtime_context().current_actor.ping.remote()
        freeze_startup_objects()

    async def _permits_of(self, scope: str) -> WarmPermits:
        permits = self._permits.get(scope)
        if permits is None or permits.closed:
            permits = await joined_permits(scope, ray.get_runtime_context().current_actor)
            self._permits[scope] = permits
            self._forget_unused_later()
        return permits

    def _forget_unused_later(self) -> None:
        """Forget, every ``FORGET_AFTER_S``, the permits of the scopes this replica no longer
        uses (see ``_permits``): what it keeps is bounded by the runs it serves now, not by
        every run it ever served."""
        if self._forgetting is None and self._permits:
            self._forgetting = asyncio.get_running_loop().call_later(FORGET_AFTER_S, self._forget_unused)

    def _forget_unused(self) -> None:
        self._forgetting = None
        if forget_unused_permits(self._permits):
            give_back_freed_memory()
        self._forget_unused_later()

    def _own_handle(self) -> Any:
        """This replica's actor handle (looked up once): the owner of the guarded leases its bodies take."""
        if self._handle is None:
            self._handle = ray.get_runtime_context().current_actor
        return self._handle

    def _node(self) -> str:
        if self._node_id is None:
            self._node_id = ray.get_runtime_context().get_node_id()
        return self._node_id

    async def handoff_call(self, wire: Sequence[Any]) -> list[Any]:
        """Take a permit of the request's scope, run the tool, give the permit back once the
        body has returned (see the module docstring). ``wire`` is a ``HandoffRequest.wire()``;
        the answer is a ``SubagentReply.wire()`` (``retired``, unrun, once this replica retires)."""
        if self._retiring:
            return SubagentReply(retired=True, node=self._node()).wire()
        self._active += 1
        self._served += 1
        self._last_activity = time.monotonic()
        self._watch_idle()
        arrived = time.perf_counter()
        try:
            reply = await self._handoff(HandoffRequest.of_wire(wire), arrived)
            if reply.ran:
                self._queued.append(reply.queued_s)
            return reply.wire()
        finally:
            self._active -= 1
            self._last_activity = time.monotonic()
            self._call_ended.set()

    async def _handoff(self, request: HandoffRequest, arrived: float) -> SubagentReply:
        lane = request.lane
        if lane is None:
            return await self._admitted(request, arrived)
        # Behind the lane's earlier requests, holding no permit.
        if not await self._lanes.enter(lane, request.ticket or ""):
            return SubagentReply(withdrawn=True, node=self._node())
        try:
            return await self._admitted(request, arrived)
        except asyncio.CancelledError:
            # Only a driver cancelling its whole batch cancels a lane's call: the calls waiting
            # behind this one are being cancelled too, and none of them may start meanwhile.
            self._lanes.withdraw_all(lane)
            raise
        finally:
            # After the body's own completion has given its permit back (its done callback
            # runs before this coroutine resumes), so the lane's next body takes it warm.
            self._lanes.leave(lane)

    async def _admitted(self, request: HandoffRequest, arrived: float) -> SubagentReply:
        permits = await self._permits_of(request.scope)
        started = time.perf_counter()
        try:
            lease = await permits.take(request.limit)
        except SemaphoreUnavailable:
            drop_permits(request.scope, permits)  # the scope was closed (or re-created): look again once
            permits = await self._permits_of(request.scope)
            lease = await permits.take(request.limit)
        now = time.perf_counter()
        waited, queued = now - started, now - arrived
        # The body's task keeps this meter in its context; this replica guards its model calls' leases.
        with metered(self._own_handle()) as meter:
            work = asyncio.ensure_future(self._run_tool(request.skill, request.arguments, request.trace_context))
        self._running += 1

        def body_returned(fut: asyncio.Future[Any]) -> None:
            self._running -= 1
            self._orphans.discard(fut)
            self._last_activity = time.monotonic()
            usage = meter.usage
            permits.give_back(lease, reuse=not fut.cancelled() and fut.exception() is None,
                              used_tokens=None if usage is None else usage.total_tokens)

        work.add_done_callback(body_returned)
        try:
            if request.timeout is None:
                # Awaiting the task itself: cancelling this call cancels it (below, too).
                result = await work
                return SubagentReply(result=result, waited_s=waited, queued_s=queued, node=self._node(),
                                     usage=meter.usage)
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
                                 queued_s=queued, node=self._node())
        return SubagentReply(result=work.result(), waited_s=waited, queued_s=queued, node=self._node(),
                             usage=meter.usage)

    async def _run_tool(self, name: str, arguments: dict[str, Any], trace_context: dict[str, str] | None) -> ToolCallResult:
        with subagent_span(name, trace_context):  # the skill's spans nest under its handoff
            result = await self._caller.call_tool(name, arguments)
        return _as_result(result)

    # ------------------------------------------------------------ retirement

    def _grace(self) -> float:
        return self._retire_after if self._served else max(self._retire_after, FIRST_CALL_GRACE_S)

    def _idle(self) -> bool:
        """Nothing running or waiting here, no body left over, and nothing for the grace period."""
        now = time.monotonic()
        return (self._active == 0 and not self._orphans and len(self._lanes) == 0
                and now - self._last_activity >= self._grace() and now >= self._kept_until)

    def _watch_idle(self) -> None:
        if self._retiring or math.isinf(self._retire_after):
            return  # it is ending (nothing more of its own may be sent: its exit waits for it), or it stays
        if self._idle_watch is None or self._idle_watch.done():
            self._idle_watch = asyncio.get_running_loop().create_task(self._until_idle())

    async def _until_idle(self) -> None:
        """Wait until the replica is idle, then ask itself to retire: the exit must happen in
        a call of the actor (``exit_actor`` ends the actor from a task), which checks again."""
        while not self._idle():
            # Until the grace would end if nothing happens meanwhile (read each time: calls
            # move it, and it shrinks once the first call is served), at most a second.
            remaining = max(self._last_activity + self._grace(), self._kept_until) - time.monotonic()
            self._call_ended.clear()
            try:  # a call that ends may move the deadline closer (the first one shrinks the grace)
                await asyncio.wait_for(self._call_ended.wait(), min(max(remaining, 0.005), 1.0))
            except TimeoutError:
                pass
        ray.get_runtime_context().current_actor.retire_if_idle.remote()

    async def retire_if_idle(self) -> bool:
        """End this replica if it is idle (see the module docstring); False (and keep
        watching) if a call came meanwhile. Atomic on the event loop with every call's entry."""
        if self._retiring:
            return True
        if not self._idle():
            self._watch_idle()
            return False
        self._retiring = True
        # Its idle warm leases go back now (a running body would hold one: there is none), and
        # its semaphore watches end (a call of its own still pending would hold up its exit).
        close_all_permits()
        ray.actor.exit_actor()
        return True  # not reached: exit_actor raises

    # ------------------------------------------------------------ the rest of the surface

    async def load(self) -> ReplicaLoad:
        """What this replica is doing now (``soloist status``); not counted as activity."""
        queued = sorted(self._queued)
        return ReplicaLoad(running=self._running, waiting=max(0, self._active - self._running),
                           served=self._served, queue_wait_p50_s=queued[len(queued) // 2] if queued else 0.0,
                           retire_after_s=None if math.isinf(self._retire_after) else self._retire_after,
                           node=self._node(), scopes=len(self._permits))

    async def keep(self, for_s: float) -> bool:
        """Do not retire for ``for_s`` seconds from now (a process's pool with users renews it,
        see ``actors.handoffs.pools``); not counted as activity. False once retiring."""
        if self._retiring:
            return False
        self._kept_until = max(self._kept_until, time.monotonic() + max(0.0, float(for_s)))
        self._watch_idle()
        return True

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

    async def renew_leases(self) -> bool:
        """A restarted semaphore service's question: renew every lease this process holds, now
        (True once every service answered). It grants nothing until this owner answered."""
        return await asyncio.to_thread(renew_held_leases)

    async def node_id(self) -> str:
        self._watch_idle()
        return self._node()

    async def ping(self) -> bool:
        self._watch_idle()
        return True


def _as_result(result: Any) -> ToolCallResult:
    if isinstance(result, ToolCallResult):
        return result
    return ToolCallResult.model_validate(result if isinstance(result, dict) else result.model_dump())


_RemoteSubagent = ray.remote(SubagentActor)

_PLACEMENT_MEMORY_BYTES = 1


def create_replica(caller: Any, skill: str, *, name: str, num_cpus: float = 0.0, node: str | None = None,
                   retire_after_s: float = DEFAULT_RETIRE_AFTER_S, resources: ReplicaResources | None = None,
                   pool: str = "", kept_s: float = 0.0) -> Any:
    """The named subagent actor ``name`` (joined if it is alive, created otherwise), on
    ``node`` when it is alive and has room there, elsewhere otherwise; it reserves
    ``resources`` (else ``num_cpus``) and retires once idle for ``retire_after_s`` (never:
    ``math.inf``) and not kept (``kept_s`` from its start, then as long as ``keep`` says),
    whoever created it and whether or not that process is still up.
    ``pool`` labels its metrics (its caller's pool key)."""
    if resources is None:
        resources = ReplicaResources(num_cpus=num_cpus)
    if node is None:
        strategy: Any = "SPREAD"
    else:
        strategy = NodeAffinitySchedulingStrategy(node, soft=True, _spill_on_unavailable=True)
    handle: Any = _RemoteSubagent.options(  # Ray types its methods as plain functions, not remote ones
        name=name,
        namespace=SOLOIST_NAMESPACE,
        get_if_exists=True,
        # Detached: a replica ends only by retiring (or by being killed), never because the
        # process that created it dropped its handle or exited. It is shared by every process
        # handing off for its caller key, and Ray kills a non-detached actor whose owner holds
        # no handle any more, even with another process's call running in it.
        lifetime="detached",
        num_cpus=resources.num_cpus,
        num_gpus=resources.num_gpus,
        resources=dict(resources.resources),
        # Ray places an actor that needs no resources at all on a random node, ignoring a soft
        # affinity. One byte of the (logical) memory resource every node has makes it honour
        # the affinity, and a replica whose node is lost still restarts on another node.
        memory=max(resources.memory, _PLACEMENT_MEMORY_BYTES),
        scheduling_strategy=strategy,
        max_restarts=-1,  # a killed replica comes back for the next call...
        max_task_retries=0,  # ...but the call it was serving fails: no silent re-execution
        max_concurrency=64,
    ).remote(caller, skill, retire_after_s, pool, kept_s)
    # Its idle watch starts with its first call: a replica created but never called (its
    # caller gone first) would otherwise never retire.
    handle.ping.remote()
    return handle
