"""Where a hosted run lives: a fixed set of named host actors, and the run's name hashed over it.

Every process computes the same host for a run from its name alone (no directory to ask or
rebuild), and a host that dies comes back under the same name (Ray restarts it; a host that
retired or whose node was lost is created again by the next call). Runs of the two placement
kinds (``_placement_kind``) have hosts of their own: ``soloist:host:<node id>:<i>`` on the
node of the process that places the run and pinned there, since the run's store file (or
its memory) is that node's; ``soloist:host:db:<i>`` free to move (database stores; Ray
restarts one on a surviving node when its node is lost). The number of hosts ``<i>`` ranges
over is the cluster's, recorded by the first process that places a run (``host_count``):
a count of each process's own would put one run on two hosts. Single activation
follows: one name, one host actor, and one ``_Slot`` per run inside it; an activation that
is superseded anyway (a host presumed dead, a driver of another cluster) is fenced by the
run's epoch in its store.

``HostedActor`` is what a handle of a hosted run holds instead of an actor handle: it takes
the commands of ``_commands`` (``await hosted.call(Snapshot())``, or ``hosted.send(...)``
for an ``ObjectRef``), each wrapped in a ``RunCall`` naming the run for its host.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
import weakref
from typing import Any, Callable, TypeVar

import ray

from actors.orchestrator._commands import AgentChanged, AgentCreated, Command, HostCall, OpenRun, RunCall
from actors.orchestrator._host import RunHostActor, RunNotHeld, TicketLost
from actors.orchestrator._reload import Reload, reload_of
from actors.orchestrator._placement_kind import Placement, placement_of, scheduling_strategy
from actors.orchestrator.spec import RunSpec
from cluster.connect import SOLOIST_NAMESPACE, node_id, shared_setting, wait_ref
from cluster.process import process_registry
from coordinators.exceptions import SoloistError

__all__ = ["HOST_PREFIX", "MOVABLE_HOST_PREFIX", "HostCountMismatch", "HostedActor", "HostSettings", "host_count", "host_settings", "host_name_for", "live_host_names", "reloadable_handle", "open_hosted", "open_hosted_async", "hosted_handle"]

HOST_PREFIX = "soloist:host:"  # every host's name starts so; a node-bound host's is HOST_PREFIX + "<node id>:<i>"
MOVABLE_HOST_PREFIX = HOST_PREFIX + "db:"  # hosts of runs stored in a database: not pinned to a node
_PREFIXES: dict[Placement, str] = {"node": HOST_PREFIX, "anywhere": MOVABLE_HOST_PREFIX}
_RemoteHost = ray.remote(RunHostActor)
_RETRY_SECONDS = 60.0  # how long a call waits for a retiring host's name to be free again
R = TypeVar("R")


_HOSTS_KEY = "run-hosts"  # the cluster's host count, in its shared settings
_DEFAULT_HOSTS = 2


class HostCountMismatch(SoloistError, ValueError):
    """This process asks for another number of run hosts than the cluster places runs over."""


class HostSettings:
    """Hosts of this process's cluster, from the environment of the process that starts them:
    a durable run unloaded after ``SOLOIST_UNLOAD_AFTER_S`` idle seconds (default 60), a host
    without runs ended after ``SOLOIST_HOST_RETIRE_S`` (default 30), at most
    ``SOLOIST_HOST_MAX_RUNS`` runs per host (default 100,000; read by the driver that starts a
    run). How many hosts there are is the cluster's (``host_count``)."""

    def __init__(self) -> None:
        self.max_runs = _env_number("SOLOIST_HOST_MAX_RUNS", 100_000, int, low=1)
        self.unload_after_s = _env_number("SOLOIST_UNLOAD_AFTER_S", 60.0, float, low=0.01)
        self.retire_after_s = _env_number("SOLOIST_HOST_RETIRE_S", 30.0, float, low=0.01)


def _env_number(name: str, default: float, kind: type, *, low: float) -> Any:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"{name}={text!r} is not {what}; unset it or give a number >= {low:g}") from None
    if not value >= low:
        raise ValueError(f"{name}={text!r} must be >= {low:g}")
    return value


def host_settings() -> HostSettings:
    return HostSettings()


def host_count() -> int:
    """How many hosts of each placement kind the connected cluster places runs over: the
    ``SOLOIST_RUN_HOSTS`` (default 2) of the first process that placed a run, recorded for the
    cluster's life (``shared_setting``). A process whose ``SOLOIST_RUN_HOSTS`` says otherwise is
    refused (``HostCountMismatch``): with two counts, two processes would put one run on two
    hosts, each fencing the other's writes."""
    asked = os.environ.get("SOLOIST_RUN_HOSTS")
    wanted = _env_number("SOLOIST_RUN_HOSTS", _DEFAULT_HOSTS, int, low=1)
    count = int(process_registry().shared_settings.get_or_create(_HOSTS_KEY, lambda: shared_setting(_HOSTS_KEY, str(wanted))))
    if asked is not None and asked.strip() and wanted != count:
        raise HostCountMismatch(
            f"SOLOIST_RUN_HOSTS={asked!r} in this process, but this cluster places runs over {count} hosts (the count of "
            f"the first process that placed a run on it); set SOLOIST_RUN_HOSTS={count} or unset it here, or start a new "
            "cluster to use another count"
        )
    return count


def host_name_for(run: str, count: int | None = None, *, store: Any = None) -> str:
    """The name of the host actor of ``run`` stored at ``store``, placed from this process: a
    stable hash of the name over the cluster's hosts of the run's placement kind, on this
    process's node for a node-bound run (its store file is this node's), anywhere for a
    database store's."""
    return _host_name(run, count, placement_of(store))


def _host_name(run: str, count: int | None, placement: Placement, node: str | None = None) -> str:
    count = host_count() if count is None else count
    digest = hashlib.blake2b(run.encode("utf-8"), digest_size=8).digest()
    index = int.from_bytes(digest, "big") % count
    if placement == "anywhere":
        return f"{MOVABLE_HOST_PREFIX}{index}"
    return f"{HOST_PREFIX}{node or this_node()}:{index}"


def this_node() -> str:
    """This process's Ray node id (a node-bound host of runs it places lives there)."""
    node = node_id()
    if node is None:
        raise RuntimeError("placing a run needs a connection to Ray (cluster.connect)")
    return node


def _placement_of_host(name: str) -> Placement:
    return "anywhere" if name.startswith(MOVABLE_HOST_PREFIX) else "node"


def _node_of_host(name: str) -> str | None:
    """The node a node-bound host's name pins it to (None: a movable host)."""
    if _placement_of_host(name) == "anywhere":
        return None
    return name[len(HOST_PREFIX):].rsplit(":", 1)[0]


def _host(name: str) -> Any:
    """The host actor called ``name`` (started when there is none), cached per Ray session."""
    def start() -> Any:
        settings = host_settings()
        # A node-bound host is pinned to the node of the driver that starts it, as a dedicated
        # orchestrator is: its runs' store files are there, and worker nodes come and go. A
        # movable host only prefers that node: Ray restarts it elsewhere when the node is lost.
        # A node-bound host is pinned to the node its name gives (the node of the process that
        # placed its runs), even when another node's process starts it again after it retired.
        return _RemoteHost.options(
            name=name, namespace=SOLOIST_NAMESPACE, get_if_exists=True, lifetime="detached", num_cpus=0,
            max_concurrency=100_000, max_restarts=-1, max_task_retries=-1,
            scheduling_strategy=scheduling_strategy(_placement_of_host(name), node=_node_of_host(name)),
        ).remote(name, settings.unload_after_s, settings.retire_after_s)

    return process_registry().run_hosts.get_or_create(name, start)


class HostedActor:
    """A hosted run, used like an actor handle. Pickles by run name, host and ``Reload``."""

    __slots__ = ("_run", "_reload", "_host_name")

    def __init__(self, run: str, reload: Reload | None, host_name: str) -> None:
        self._run = run
        self._reload = reload
        self._host_name = host_name

    @property
    def host_name(self) -> str:
        return self._host_name

    def host(self) -> Any:
        """The host actor's handle (its liveness is the run's, for whoever watches the run)."""
        return _host(self._host_name)

    def forget_host(self) -> None:
        """The cached host handle is dead (the host retired or its node was lost): the next call
        starts or finds the host again under the same name."""
        process_registry().run_hosts.discard(self._host_name)

    def with_reload(self, reload: Reload) -> HostedActor:
        """This run's handle that may activate it again from its store (an owner's: one that
        can open the store). A handle without one only reaches the run while a host holds it.
        The host is the one of the store's placement kind."""
        return HostedActor(self._run, reload, host_name_for(self._run, store=reload.store))

    async def call(self, command: Command[R]) -> R:
        """Run ``command`` on the run, from code on an event loop: its value, or the run's own
        error as itself (not wrapped by Ray); Ray's errors about the host as they are. A
        ``batched`` command travels with the other calls this loop sends the same host in the
        same turn."""
        try:
            return await self._send(command, None)
        except RunNotHeld:
            if self._reload is None:
                raise
        return await self._send(command, self._reload)  # the host restarted: activate from the store

    async def _send(self, command: Command[R], reload: Reload | None) -> R:
        # Without the Reload while the host holds the run (see ``RunCall``).
        call = RunCall(self._run, reload, command)
        if not command.batched:
            try:
                return await self.host().call_one.remote(call)
            except ray.exceptions.RayTaskError as exc:
                raise _cause(exc) from None
        return await _batcher().submit(self, call)

    def send(self, command: Command[Any]) -> Any:
        """``command`` to the run as a Ray call of its own, without waiting (an ``ObjectRef``):
        for code that is not on an event loop, or that fires and forgets."""
        return self.host().call_one.remote(RunCall(self._run, self._reload, command))

    @property
    def agent_created(self) -> _AgentReport:
        """``hosted.agent_created.remote(agent_id, kind, config, handle)``: how a subagent pool
        reports a replica (``actors.handoffs.pools``), as on a dedicated actor's handle."""
        return _AgentReport(self, AgentCreated)

    @property
    def agent_changed(self) -> _AgentReport:
        """``hosted.agent_changed.remote(agent_id, lifecycle, last_error)``: as ``agent_created``."""
        return _AgentReport(self, AgentChanged)

    def release(self) -> Any:
        """The run was closed: the host forgets it (an ``ObjectRef``)."""
        return self.host().drop_run.remote(self._run)

    def unload(self) -> Any:
        """Unload the run now if it is durable and idle (an ``ObjectRef`` of a bool)."""
        return self.host().unload_run.remote(self._run)

    def __reduce__(self) -> tuple[Any, ...]:
        return (HostedActor, (self._run, self._reload, self._host_name))

    def __repr__(self) -> str:
        return f"HostedActor({self._run!r} on {self._host_name})"


class _AgentReport:
    """A pool's fire-and-forget report to a hosted run, sent as the command ``make`` builds."""

    __slots__ = ("_hosted", "_make")

    def __init__(self, hosted: HostedActor, make: Callable[..., Command[Any]]) -> None:
        self._hosted = hosted
        self._make = make

    def remote(self, *args: Any) -> Any:
        return self._hosted.send(self._make(*args))


def open_hosted(spec: RunSpec, owner_job: str | None) -> HostedActor:
    """Start ``spec``'s run on its host; the run's ``HostedActor``."""
    settings = host_settings()
    hosted = HostedActor(spec.name, reload_of(spec, owner_job), host_name_for(spec.name, store=spec.store))
    wire = spec.for_host()
    _with_live_host(hosted, lambda host: wait_ref(host.call_one.remote(OpenRun(wire, owner_job, settings.max_runs))))
    return hosted


async def open_hosted_async(spec: RunSpec, owner_job: str | None) -> HostedActor:
    """``open_hosted`` for code on an event loop: the same start, awaited."""
    settings = host_settings()
    hosted = HostedActor(spec.name, reload_of(spec, owner_job), host_name_for(spec.name, store=spec.store))
    deadline = time.monotonic() + _RETRY_SECONDS
    wire = spec.for_host()
    while True:
        try:
            await _batcher().submit(hosted, OpenRun(wire, owner_job, settings.max_runs))
            return hosted
        except ray.exceptions.ActorDiedError:  # the host retired meanwhile: start it again
            if time.monotonic() > deadline:
                raise
            hosted.forget_host()
            await asyncio.sleep(0.05)


def reloadable_handle(run: str, reload: Reload) -> HostedActor:
    """The run's ``HostedActor`` that may activate it from its store (``reload``), whether or
    not a host holds it now: its first call activates it there."""
    return HostedActor(run, reload, host_name_for(run, store=reload.store))


def hosted_handle(run: str, reload: Reload | None = None) -> HostedActor | None:
    """The ``HostedActor`` of a run its host holds now (loaded or unloaded), else None; with
    ``reload``, the run's ``HostedActor`` whether or not a host holds it (its first call
    activates it from the store). Without ``reload`` the handle never brings a closed run back;
    it is looked for on the run's host of each placement kind (its store is not known), on
    this process's node first, then on every other node's."""
    if reload is not None:
        return reloadable_handle(run, reload)
    here = _host_name(run, None, "node")
    index = here.rsplit(":", 1)[1]
    candidates = [here, _host_name(run, None, "anywhere")]
    candidates += sorted(name for name in live_host_names()
                         if name not in candidates and _placement_of_host(name) == "node" and name.rsplit(":", 1)[1] == index)
    for name in candidates:
        hosted = HostedActor(run, None, name)
        try:
            ray.get_actor(hosted.host_name, namespace=SOLOIST_NAMESPACE)
        except ValueError:
            continue  # no host of that name: it holds no run
        if _with_live_host(hosted, lambda host: wait_ref(host.has_run.remote(run))):
            return hosted
    return None


def live_host_names() -> list[str]:
    """The names of the host actors alive on the connected cluster."""
    return [entry["name"] for entry in ray.util.list_named_actors(all_namespaces=True)
            if entry.get("namespace") == SOLOIST_NAMESPACE and entry["name"].startswith(HOST_PREFIX)]


class _Pending:
    __slots__ = ("hosted", "call", "future")

    def __init__(self, hosted: HostedActor, call: HostCall, future: asyncio.Future[Any]) -> None:
        self.hosted = hosted
        self.call = call
        self.future = future


class _HostBatcher:
    """Calls one event loop sends to hosts, gathered per host for one turn of the loop and
    sent as one Ray call (``call_many``). A Ray call costs each side about half a millisecond
    of CPU on this kind of machine, far more than a run's own work; a thousand runs applying
    at once from one driver then cost a few Ray calls per turn instead of a thousand. A lone
    call goes as it would without batching, and nothing waits for a batch to fill."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiting: dict[str, list[_Pending]] = {}

    def submit(self, hosted: HostedActor, call: HostCall) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = self._loop.create_future()
        if not self._waiting:
            self._loop.call_soon(self._flush)
        self._waiting.setdefault(hosted.host_name, []).append(_Pending(hosted, call, future))
        return future

    def _flush(self) -> None:
        waiting, self._waiting = self._waiting, {}
        for calls in waiting.values():
            task = self._loop.create_task(self._send(calls))
            _SENDING.add(task)
            task.add_done_callback(_SENDING.discard)

    async def _send(self, calls: list[_Pending]) -> None:
        host = None
        try:
            host = calls[0].hosted.host()
            if len(calls) == 1:
                _settle(calls[0].future, *await _alone(host, calls[0].call))
                return
            outcomes = await host.call_many.remote([p.call for p in calls])
        except BaseException as exc:  # the host (or Ray) failed the whole batch: each caller sees it
            for pending in calls:
                _settle(pending.future, False, _cause(exc) if isinstance(exc, ray.exceptions.RayTaskError) else exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        running = _settle_all(calls, outcomes)
        if running:  # still running on the host when the batch answered: collected together
            task = self._loop.create_task(_collect(host, running))
            _SENDING.add(task)
            task.add_done_callback(_SENDING.discard)


_SENDING: set[asyncio.Task[None]] = set()  # batches and tickets in flight (tasks need a reference)
_batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _HostBatcher] = weakref.WeakKeyDictionary()


def _batcher() -> _HostBatcher:
    """This event loop's batcher (one per loop: a batch is what one loop sends in one turn)."""
    loop = asyncio.get_running_loop()
    batcher = _batchers.get(loop)
    if batcher is None:
        batcher = _batchers[loop] = _HostBatcher(loop)
    return batcher


async def _alone(host: Any, call: HostCall) -> tuple[bool, Any]:
    """One call as a Ray call of its own: ``(True, value)`` or ``(False, the run's error)``."""
    try:
        return True, await host.call_one.remote(call)
    except ray.exceptions.RayTaskError as exc:
        return False, _cause(exc)


def _settle_all(calls: list[_Pending], outcomes: list[tuple[bool | None, Any]]) -> dict[str, _Pending]:
    """Settle the calls a host answered; the others' tickets (their calls still run)."""
    running: dict[str, _Pending] = {}
    for pending, (ok, value) in zip(calls, outcomes):
        if ok is None:
            running[value] = pending
        else:
            _settle(pending.future, ok, value)
    return running


async def _collect(host: Any, running: dict[str, _Pending]) -> None:
    """The outcomes of ticketed calls, asked for together until every one has ended; a call
    the host lost (it restarted) is sent again alone: writes carry request ids, so the resend
    is exactly-once."""
    while running:
        tickets = list(running)
        try:
            outcomes = await host.outcomes.remote(tickets)
        except Exception as exc:  # Ray's own error about the host: each caller retries or reports it
            for pending in running.values():
                _settle(pending.future, False, _cause(exc) if isinstance(exc, ray.exceptions.RayTaskError) else exc)
            return
        lost = [running[t] for t, (ok, value) in zip(tickets, outcomes) if ok is False and isinstance(value, TicketLost)]
        for pending in lost:
            try:
                _settle(pending.future, *await _alone(pending.hosted.host(), pending.call))
            except Exception as again:  # Ray's own error about the host
                _settle(pending.future, False, again)
        kept = [(t, o) for t, o in zip(tickets, outcomes) if not (o[0] is False and isinstance(o[1], TicketLost))]
        running = _settle_all([running[t] for t, _ in kept], [o for _, o in kept])


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():  # the caller stopped waiting
        return
    if ok:
        future.set_result(value)
    elif isinstance(value, asyncio.CancelledError):
        future.cancel()
    else:
        future.set_exception(value)


def _cause(exc: ray.exceptions.RayTaskError) -> BaseException:
    """The run's own error inside Ray's wrapping of it (Ray's wrapper when there is none)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) and not isinstance(cause, ray.exceptions.RayError) else exc


def _with_live_host(hosted: HostedActor, call: Any) -> Any:
    """``call(host)``, again with a fresh host when this one ended meanwhile (it retired)."""
    deadline = time.monotonic() + _RETRY_SECONDS
    while True:
        try:
            return call(hosted.host())
        except ray.exceptions.ActorDiedError:
            if time.monotonic() > deadline:
                raise
            hosted.forget_host()
            time.sleep(0.05)
