"""``Orchestrator``: the typed client handle of a run's single-writer actor.

The handle checks arguments before anything reaches Ray, translates actor-side failures back
into the caller's own exception types, and holds the owner's token: the capability every
write must present. A handle that is pickled (shipped to a task or an actor) loses the token
and becomes read-only, unless the owner hands it out on purpose with ``delegate()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any, Callable, TypeVar, cast

import ray
from pydantic import BaseModel

from actors import telemetry
from actors.agents.managed import AgentConfig, AgentKind, Lifecycle
from actors.callers.protocol import ToolCaller
from actors.exceptions import OrchestratorClosed, WriteRefused
from actors.handoffs._permits import release_idle_permits
from actors.handoffs.pools import track, untrack
from actors.handoffs.settings import (
    DEFAULT_MAX_PARALLEL,
    HARD_MAX_PARALLEL,
    HandoffSettings,
    effective_max_parallel,
)
from actors.interrupts import RunStatus
from actors.orchestrator._arguments import checked_transitions, request_id_of
from actors.orchestrator._building import Found, check_max_parallel, find_run, live_runs, new_run_spec, owner_job, starting
from actors.orchestrator._calls import call_writer, send, wait_ready
from actors.orchestrator._commands import (
    AgentChanged,
    AgentCreated,
    AgentHandle,
    Agents,
    Apply,
    ApplyBatch,
    Close,
    Command,
    Context,
    Describe,
    MarkRun,
    MaxParallel,
    SetMaxParallel,
    Snapshot,
    Statistics,
    Version,
)
from actors.orchestrator._launch import actor_name, start_actor
from actors.orchestrator._placement import HostedActor, open_hosted, open_hosted_async
from actors.orchestrator._reads import HistoryReads
from actors.orchestrator.spec import DEFAULT_KEEP_VERSIONS, OrchestratorStatistics, RunDescription
from cluster.connect import ensure_connected, wait_ref
from cluster.semaphore import ClusterSemaphore
from cluster.storage import Store
from coordinators import ContextSnapshot, StateTransition, TransitionBatch

__all__ = ["Orchestrator", "DEFAULT_MAX_PARALLEL", "HARD_MAX_PARALLEL", "actor_name"]

S = TypeVar("S", bound=BaseModel)
R = TypeVar("R")

_CAP_READ_SECONDS = 2.0  # a parallel handoff never waits longer than this on a restarting actor


class Orchestrator(HistoryReads[S]):
    """Owns a run's typed state through one actor: the only writer.

    ``initial`` is any pydantic model instance. ``store`` is a SQLite file path, a
    ``postgresql://`` URL (or a store object); None keeps the state in memory only. ``durability`` is ``"sync"``, ``"batch"``
    or ``"exit"``. ``name`` makes the run findable by ``Orchestrator.attach`` from other
    processes. The constructor is synchronous and starts an embedded Ray on first use;
    ``await Orchestrator.open(...)`` takes the same arguments, for code on an event loop.
    ``keep_versions`` / ``keep_days`` set the retention window of a durable run's journal:
    checkpoint compaction keeps at least the last N versions / the last D days readable by
    ``history`` and ``fork`` (with both, the stricter wins; both None keeps everything).

    Runs share host actors: a run's orchestrator lives in one of a few host processes (its
    name hashed over them), with its own serialised writes, and a durable run idle for a while
    leaves memory until its next call (after ``unload_after_s`` idle seconds; None: the host's
    default, ``SOLOIST_UNLOAD_AFTER_S``). ``dedicated=True`` gives the run an actor process of
    its own instead (a huge state, a process to itself). ``detached`` keeps the run after this
    driver exits (otherwise it is closed with it).
    """

    def __init__(
        self,
        initial: S,
        *,
        caller: ToolCaller | None = None,
        name: str | None = None,
        store: str | Store | None = None,
        durability: str = "sync",
        max_parallel: int = DEFAULT_MAX_PARALLEL,
        semaphore_scope: str | None = None,
        checkpoint_every: int = 1_000,
        detached: bool = False,
        keep_versions: int | None = DEFAULT_KEEP_VERSIONS,
        keep_days: float | None = None,
        dedicated: bool = False,
        unload_after_s: float | None = None,
        _metadata: dict[str, Any] | None = None,
    ) -> None:
        spec = new_run_spec(
            initial, caller=caller, name=name, store=store, durability=durability, max_parallel=max_parallel,
            semaphore_scope=semaphore_scope, checkpoint_every=checkpoint_every, keep_versions=keep_versions,
            keep_days=keep_days, dedicated=dedicated, unload_after_s=unload_after_s, metadata=_metadata,
        )
        with starting(spec):
            handle = start_actor(spec, detached=detached) if dedicated else open_hosted(spec, owner_job=owner_job(detached))
        self._bind(handle, spec.described(), spec.token, durable=spec.store is not None)
        if dedicated:
            wait_ready(handle, spec.name)
        self._track_agents()

    @classmethod
    async def open(
        cls,
        initial: S,
        *,
        caller: ToolCaller | None = None,
        name: str | None = None,
        store: str | Store | None = None,
        durability: str = "sync",
        max_parallel: int = DEFAULT_MAX_PARALLEL,
        semaphore_scope: str | None = None,
        checkpoint_every: int = 1_000,
        detached: bool = False,
        keep_versions: int | None = DEFAULT_KEEP_VERSIONS,
        keep_days: float | None = None,
        dedicated: bool = False,
        unload_after_s: float | None = None,
    ) -> "Orchestrator[S]":
        """Start a run from code on an event loop: the constructor's arguments, the same run,
        the same errors. It awaits the run's host instead of blocking a thread, so one loop
        starts many runs at once (``asyncio.gather``) and their creations share group commits.
        A ``dedicated`` run starts its own process (seconds): that start runs on a thread."""
        kwargs: dict[str, Any] = dict(
            caller=caller, name=name, store=store, durability=durability, max_parallel=max_parallel,
            semaphore_scope=semaphore_scope, checkpoint_every=checkpoint_every, detached=detached,
            keep_versions=keep_versions, keep_days=keep_days, dedicated=dedicated, unload_after_s=unload_after_s,
        )
        if dedicated:
            return await asyncio.to_thread(lambda: cls(initial, **kwargs))
        if not ray.is_initialized():
            await asyncio.to_thread(ensure_connected)  # an embedded Ray starts in seconds: not on the loop
        del kwargs["detached"]
        spec = new_run_spec(initial, metadata=None, **kwargs)
        with starting(spec):
            handle = await open_hosted_async(spec, owner_job=owner_job(detached))
        self = cls.__new__(cls)
        self._bind(handle, spec.described(), spec.token, durable=spec.store is not None)
        self._track_agents()
        return self

    # ------------------------------------------------------------ construction

    # Every handle is one of these fields, set in one place (``_bind``): by the constructor,
    # and through ``_handle`` by attach, a restart from the store, ``delegate`` and unpickling.
    _actor: Any  # the run's actor (a Ray actor handle)
    _described: RunDescription  # what the run is: name, caller, state type, scope, retention
    _name: str
    _token: str | None  # the owner's capability; None for a read-only handle
    _delegated: bool  # the owner handed this handle out on purpose: it keeps the token when pickled
    _caller: ToolCaller | None
    _state_type: type[BaseModel] | None
    _max_parallel: int  # as requested; the effective cap is clamped
    _semaphore_scope: str
    _durable: bool  # the actor restarts from a store: calls are retried while it is unavailable
    _closed: bool
    _stops_actor: bool  # close() stops the actor (False for a handle that borrows a live run)
    _semaphore_joined: bool  # this handle has joined the run's semaphore scope (at its first handoff)
    _join_lock: threading.Lock
    _logger: logging.LoggerAdapter[logging.Logger]
    _tracer: Any  # an OpenTelemetry tracer, or None

    @classmethod
    def _handle(cls, actor: Any, described: RunDescription, token: str | None, *, durable: bool,
                delegated: bool = False) -> Orchestrator[Any]:
        """A handle of the live ``actor``: the one way to build one outside the constructor."""
        self = cls.__new__(cls)
        self._bind(actor, described, token, durable=durable, delegated=delegated)
        return self

    def _bind(self, actor: Any, described: RunDescription, token: str | None, *, durable: bool,
              delegated: bool = False) -> None:
        self._actor = actor
        self._described = described
        self._name = described.name
        self._token = token
        self._delegated = delegated
        self._caller = described.caller
        self._state_type = described.state_type
        self._max_parallel = described.max_parallel
        self._semaphore_scope = described.semaphore_scope
        self._durable = durable
        self._closed = False
        # Whether close() stops the actor: True for the handle that started it; False for a
        # handle that attached to a run some other process drives (it only borrows it).
        self._stops_actor = True
        self._semaphore_joined = False
        self._join_lock = threading.Lock()
        self._logger = _component_logger(logging.getLogger("soloist.orchestrator"), described.name)
        self._tracer = None

    @classmethod
    def attach(
        cls, name: str, *, store: Any = None, durability: str | None = None, token: str | None = None
    ) -> "Orchestrator[Any]":
        """A handle to the live run called ``name``, or a restarted one from ``store``.

        With ``store`` the handle may write (whoever can open the run's store owns it); a
        live run attached without it (and without ``token``) gives a read-only handle.

        A handle to a live run only borrows it: its ``close()`` releases the handle and leaves
        the run and its actor to whoever drives them. A handle that restarted the run from
        ``store`` started its actor, and its ``close()`` stops it. A run has one writer: when
        another process (on another Ray cluster) has the run open, restarting it here is
        refused with ``cluster.storage.RunLockedElsewhere``, whose message names that
        process and its cluster's address (connect there to reach the live run).

        ``durability``: the run is reopened with the durability it was created with (it is
        stored with the run); a mode given here overrides it.
        """
        return cls._from_found(find_run(name, store=store, durability=durability, token=token))

    @staticmethod
    def list_live() -> list[str]:
        """The names of the orchestrators alive on the connected cluster (started with ``name=``), sorted.

        Connects first if nothing is connected, like the constructor. Attach one with
        ``Orchestrator.attach(name)``; a run may close between the two calls
        (``OrchestratorNotFound``).
        """
        return live_runs()

    @classmethod
    def _from_found(cls, found: Found) -> "Orchestrator[Any]":
        """A handle of the run ``attach`` found (see ``_building.find_run``)."""
        self = cls._handle(found.actor, found.described, found.token, durable=True)
        self._stops_actor = not found.borrowed  # borrowed: the run belongs to the process that drives it
        self._track_agents()
        return self

    def _track_agents(self) -> None:
        """Have this process's subagent pools for our caller report their replicas to the run."""
        if self._caller is not None:
            track(self._caller, self._name, self._actor)

    def delegate(self) -> "Orchestrator[S]":
        """A copy of this handle that keeps write access when pickled (explicit capability)."""
        self._require_owner("delegate()")
        twin = self._handle(self._actor, self._current(), self._token, durable=self._durable, delegated=True)
        twin._logger, twin._tracer = self._logger, self._tracer
        return twin

    def _current(self) -> RunDescription:
        """The run as this handle knows it now (the cap may have changed since it was built)."""
        return self._described.model_copy(update={"max_parallel": self._max_parallel})

    def __reduce__(self) -> Any:
        token = self._token if self._delegated else None
        return (_rebuild, (self._actor, self._current(), token, self._durable, self._delegated))

    def __repr__(self) -> str:
        mode = "owner" if self._token else "read-only"
        return f"<Orchestrator {self._name!r} ({mode})>"

    # ---------------------------------------------------------------- reads

    @property
    def name(self) -> str:
        return self._name

    @property
    def caller(self) -> ToolCaller | None:
        """The ``ToolCaller`` this run hands off through (None without one)."""
        return self._caller

    @property
    def read_only(self) -> bool:
        return self._token is None

    @property
    def max_parallel(self) -> int:
        """The effective parallel-handoff cap: ``set_max_parallel`` normalised and clamped."""
        return effective_max_parallel(self._max_parallel)

    def handoff_settings(self) -> HandoffSettings:
        """What ``handoff``/``parallel_handoff`` need of this run, as one frozen value."""
        return HandoffSettings(
            name=self._name,
            caller=self._caller,
            semaphore_scope=self._semaphore_scope,
            max_parallel=effective_max_parallel(self._max_parallel),
            requested_max_parallel=self._max_parallel,
            logger=self._logger,
            tracer=self._tracer,
        )

    async def snapshot(self) -> S:
        """A deep copy of the committed state (same type as the initial state)."""
        _, state = await self.versioned_snapshot()
        return state

    async def versioned_snapshot(self) -> tuple[int, S]:
        """``(version, state)`` read together, for compare-and-set loops."""
        started = time.perf_counter()
        version, state = await self._call(Snapshot())
        telemetry.record_snapshot(self._name, time.perf_counter() - started)  # the round trip callers wait for
        return version, cast(S, state)  # the run's state is of the handle's state type

    async def version(self) -> int:
        return await self._call(Version())

    async def context(self) -> ContextSnapshot:
        """A deeply immutable ``ContextSnapshot`` of the committed ``AgentState``."""
        return await self._call(Context())

    async def describe(self) -> RunDescription:
        """What the run is (name, caller, state type, cap, semaphore scope, retention), as its
        actor reports it now; never the token."""
        return await self._call(Describe())

    async def statistics(self) -> OrchestratorStatistics:
        return await self._call(Statistics())

    @property
    def hosted(self) -> bool:
        """True when the run lives on a shared run host (False: a dedicated actor of its own)."""
        return isinstance(self._actor, HostedActor)

    async def unload(self) -> bool:
        """Take the run out of its host's memory now, as an idle run leaves it on its own: the
        last version is checkpointed and the next call (from any handle) activates the run
        again from its store. True once unloaded; False for a run that cannot leave memory
        (no store, a dedicated actor) or is busy (a write, a subscriber or an agent at work)."""
        if not isinstance(self._actor, HostedActor):
            return False
        return bool(await self._actor.unload())

    async def join_semaphore(self) -> None:
        """Make sure the run's semaphore scope is open on its semaphore service and counts
        this run among its users (``handoff`` calls this first; a no-op once done on this
        handle). Joined at the first handoff, not when the run starts: a run that never hands
        off costs its scope nothing. The scope's table lives as long as some run that joined
        it does."""
        if self._closed:
            raise OrchestratorClosed(f"orchestrator {self._name!r} is closed: it hands off nothing more")
        if not self._semaphore_joined:
            await asyncio.to_thread(self._join_semaphore)

    def _join_semaphore(self) -> None:
        with self._join_lock:  # two first handoffs at once join once
            if not self._semaphore_joined:
                # Watched for liveness by the scope: a hosted run's is its host's.
                actor = self._actor.host() if isinstance(self._actor, HostedActor) else self._actor
                ClusterSemaphore.join_run(self._semaphore_scope, self._name, actor)
                self._semaphore_joined = True

    async def refresh_max_parallel(self) -> int:
        """Read the run's cap from the actor (another process may have changed it)."""
        try:
            self._max_parallel = await asyncio.wait_for(send(self._actor, MaxParallel()), _CAP_READ_SECONDS)
        except (ray.exceptions.RayError, asyncio.TimeoutError):
            pass  # restarting or gone: keep the cached cap; the cluster semaphore still caps at 4
        return self.max_parallel

    # --------------------------------------------------------------- writes

    async def apply(self, fn: Callable[[S], Any], *, request_id: str | None = None) -> int:
        """Run ``fn`` on a working copy and commit the validated result; return the new version.

        If ``fn`` raises, or the result does not validate against the model, the state is
        unchanged and the original exception reaches the caller. ``request_id`` (default: a
        fresh one) makes the write exactly-once: resending an id that was already committed,
        also after a crash or from another driver, returns the recorded version and applies
        nothing.
        """
        if fn is None:
            raise TypeError("apply(None): pass a function that mutates the state it is given (or returns a new one)")
        if not callable(fn):
            raise TypeError(f"apply() takes a callable, got {type(fn).__name__}")
        token = self._require_owner("apply()")
        return await self._call(Apply(token, request_id_of(request_id), fn))

    async def apply_batch(
        self, batch: TransitionBatch | Iterable[StateTransition], *, expected_version: int | None = None,
        request_id: str | None = None,
    ) -> int:
        """Apply transitions through ``reduce``, all or nothing; return the new version.

        With ``expected_version`` this is a compare-and-set: a stale version raises
        ``VersionConflict`` and nothing changes. ``request_id``: as for ``apply``.
        """
        transitions = checked_transitions(batch, expected_version)
        token = self._require_owner("apply_batch()")
        return await self._call(ApplyBatch(token, request_id_of(request_id), transitions, expected_version))

    # ------------------------------------------------------- run bookkeeping
    # The declared surface the run layer (``actors.run.Run``) reports through: facts kept in
    # the run's store entry and its managed-agent records, not run state (no version moves).

    async def mark_run(self, status: RunStatus, *, finished: bool = False) -> None:
        """Record the run's ``status`` in its store entry, with the time as ``finished_at``
        (``finished``: ``soloist gc`` reads it) or ``updated_at``. Owner's handle only."""
        token = self._require_owner("mark_run()")
        facts: dict[str, Any] = {"status": status, ("finished_at" if finished else "updated_at"): time.time()}
        await self._call(MarkRun(token, facts))

    async def agent_created(self, agent_id: str, kind: AgentKind, config: AgentConfig, handle: Any) -> None:
        """An actor of the run (a coordinator, a subagent) was (re-)created: its record goes
        ``initializing`` then ``idle``, with how to re-create it after a restart."""
        await self._call(AgentCreated(agent_id, kind, config, handle))

    async def agent_changed(self, agent_id: str, lifecycle: Lifecycle, last_error: str | None = None) -> None:
        """An agent of the run changed lifecycle (``IllegalLifecycleTransition`` if it may not)."""
        await self._call(AgentChanged(agent_id, lifecycle, last_error))

    # -------------------------------------------------------- managed agents

    async def agents(self) -> list[dict[str, Any]]:
        """Every managed agent of the run (subagent replicas, coordinators) as ``to_payload`` dicts."""
        return await self._call(Agents())

    async def agent_handle(self, agent_id: str) -> Any:
        """The live actor handle of an agent; after a restart it is re-created from its stored
        record on first use (concurrent first uses create it once)."""
        return await self._call(AgentHandle(agent_id))

    def set_max_parallel(self, n: int) -> None:
        """Set the parallel-handoff cap for every handle of this run.

        ``n <= 0`` means the default (4); ``n > 4`` is clamped to 4, with a warning logged on
        every parallel handoff that uses it. Read when a parallel handoff starts.
        """
        check_max_parallel(n)
        token = self._require_owner("set_max_parallel()")
        # Waits for the actor, so every handle in every process sees the new cap from now on.
        wait_ref(send(self._actor, SetMaxParallel(token, n)), timeout=60)
        self._max_parallel = n

    def set_logger(self, logger: logging.Logger | None) -> None:
        """Log through ``logger``, every record tagged ``component=agent-orchestrator``. None: no-op."""
        if logger is None:
            return
        self._logger = _component_logger(logger, self._name)

    def set_tracer(self, tracer: Any) -> None:
        """Trace handoffs with this OpenTelemetry tracer. None: no-op."""
        if tracer is None:
            return
        self._tracer = tracer

    async def close(self) -> None:
        """Stop the actor. A durable run can be attached again later with its store.

        A handle that ``attach`` gave for a run that was already live only releases itself:
        the run goes on untouched (reading or answering a run never ends someone else's run).
        """
        if self._closed:
            return
        if not self._stops_actor:
            # Pool tracking is keyed by run, not by handle: the run's actor still lives (and an
            # owner's handle in this process may still use the same entry), so it stays.
            self._closed = True
            return
        token = self._require_owner("close()")
        self._closed = True
        untrack(self._name)
        release_idle_permits(self._semaphore_scope)
        try:
            await self._call(Close(token))
        finally:
            if isinstance(self._actor, HostedActor):
                with contextlib.suppress(ray.exceptions.RayActorError):
                    await self._actor.release()
            else:
                ray.kill(self._actor, no_restart=True)
            await self._leave_semaphore()

    async def _leave_semaphore(self) -> None:
        """The run no longer uses its scope: the scope's actor ends once no run does (at
        once, or when the work of its last held leases has returned)."""
        outcome = await ClusterSemaphore.leave_run(self._semaphore_scope, self._name)
        self._logger.debug("left semaphore %s: %s", self._semaphore_scope, outcome or "already gone")

    # ------------------------------------------------------------- internals

    def _require_owner(self, what: str) -> str:
        """The owner's token, for ``what`` to present; refused on a closed or read-only handle."""
        if self._closed:
            raise OrchestratorClosed(f"orchestrator {self._name!r} is closed")
        if self._token is None:
            raise WriteRefused(
                f"{what} on orchestrator {self._name!r} needs the owner's handle: this one is read-only "
                "(it was shipped to another process or attached without the store)"
            )
        return self._token

    async def _call(self, command: Command[R]) -> R:
        """Run ``command`` on the run's writer (see ``_calls.call_writer``)."""
        return await call_writer(self._actor, command, durable=self._durable, name=self._name)


class _ComponentLogger(logging.LoggerAdapter[logging.Logger]):
    """Adds ``component`` and ``orchestrator`` to every record, keeping the call's own extras."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


def _component_logger(logger: logging.Logger, name: str) -> logging.LoggerAdapter[logging.Logger]:
    return _ComponentLogger(logger, {"component": "agent-orchestrator", "orchestrator": name})


def _rebuild(actor: Any, described: RunDescription, token: str | None, durable: bool, delegated: bool) -> Orchestrator[Any]:
    """Unpickle a handle (``Orchestrator.__reduce__``)."""
    return Orchestrator._handle(actor, described, token, durable=durable, delegated=delegated)
