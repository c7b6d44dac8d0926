"""The orchestrator actor: the single writer of one run's state.

This module holds the Ray actor class behind the typed ``Orchestrator`` facade. It is an
*async* actor on purpose: reads (``snapshot``, ``version``, ``context``, ``changes``) run on
the event loop against the last committed state and never take the write lock, while
writes are serialised by one ``asyncio.Lock``. ``apply(fn)`` runs ``fn`` on a private deep
copy in a worker thread, so a slow ``fn`` never holds up readers: they see the previous
version until the new one is committed. Committed state objects are never mutated again
(copy-on-write), which is what makes handing them to Ray's serializer without a lock safe.

Durability (with a store): every write is journalled under a request id before it becomes
visible. ``sync`` keeps the write lock until the journal entry is fsynced; ``batch``
releases the lock once the entry is queued, so concurrent writers share one fsync (group
commit) while each caller is still acknowledged only after its entry is durable; ``exit``
keeps the journal in memory until ``close``. Readers only ever see durable versions.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import hmac
import inspect
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Protocol, TypeVar

from pydantic import BaseModel

from actors import telemetry
from actors.agents.registry import AgentRegistry
from actors.exceptions import HistoryCompacted, OrchestratorClosed, VersionConflict, WriteRefused
from actors.handoffs.pools import recreate_replica
from actors.orchestrator._activation import Activation, Stage
from actors.orchestrator._change_log import ChangeLog
from actors.orchestrator._inbox import inbox_of
from actors.orchestrator._history import read_history, retention_floor, state_at
from actors.orchestrator._json_clean import clean_json
from actors.orchestrator._recovery import CLOSED_MARK, journal_entry, restore_or_create
from actors.orchestrator.changes import Change, ChangeKind
from actors.orchestrator.spec import OrchestratorStatistics, RunDescription, RunSpec
from cluster.connect import actor_was_restarted, cluster_address, node_id
from cluster.heap import freeze_startup_objects
from cluster.storage import RunInfo, RunLockedElsewhere, Store, diff_states
from coordinators import AgentState, ContextSnapshot, StateTransition, reduce, shared_records

__all__ = ["OrchestratorActor", "Hosting", "WriterCommand"]

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class WriterCommand(Protocol[R_co]):
    """What ``OrchestratorActor.serve`` runs: a command of ``actors.orchestrator._commands``,
    the table of this writer's operations (each runs itself on the writer)."""

    def run(self, writer: OrchestratorActor) -> Awaitable[R_co]: ...


@dataclasses.dataclass(frozen=True)
class Hosting:
    """What a run host lends each run it holds: the store object of the run's file (shared by
    every run of that file on the host, so their writes share its group commits), and the
    threads its ``fn`` and its store I/O run on (a host holds thousands of runs: never two
    threads per run). Each run's writes stay serialised by its own write lock."""

    store: Any
    fn_executor: ThreadPoolExecutor
    io_executor: ThreadPoolExecutor
    holder: dict[str, Any]
    """Who activates the run (recorded with its fencing epoch): the host's name and process."""
    creating: bool
    """A new run (else one activated again, which must be in its store already)."""
    restarted: bool = False
    """Ray restarted the host (asked once per host: the question is a round trip to the GCS)."""


_REQUEST_MEMORY = 50_000  # request id -> version, most recent first, for exactly-once
_CLAIM_SECONDS = 2.0  # how long a claim waits out a brief lock (another process's transaction)
_PEER_EXIT_SECONDS = 60.0  # how long it waits for a dying actor of this run on this cluster to exit


class OrchestratorActor:
    """Owns one run's state. Created only through ``actors.Orchestrator``."""

    def __init__(self, spec: RunSpec, hosting: Hosting | None = None) -> None:
        self._spec = spec
        self._hosting = hosting
        self._name = spec.name
        self._token = spec.token
        self._log = logging.LoggerAdapter(
            logging.getLogger(spec.logger_name),
            {"component": "agent-orchestrator", "orchestrator": spec.display_name},
        )
        # Writers queue here; readers never touch it.
        self._write_lock = asyncio.Lock()
        # fn runs here (under the write lock, so a user fn never runs concurrently with another
        # of this run); store I/O that is not a journal append (checkpoints, compaction) there.
        if hosting is None:
            self._fn_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="soloist-apply")
            self._io_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="soloist-io")
        else:
            self._fn_executor, self._io_executor = hosting.fn_executor, hosting.io_executor
        # (version, state) last made visible: durable, never mutated again.
        self._committed: tuple[int, BaseModel] = (0, spec.initial)
        # (version, state) the next write builds on; ahead of _committed only in batch mode.
        self._head: tuple[int, BaseModel] = (0, spec.initial)
        # Acknowledged out of order in batch mode; published strictly in version order.
        self._acked: dict[int, tuple[BaseModel, Change]] = {}
        self._requests: collections.OrderedDict[str, int] = collections.OrderedDict()
        # True while _requests holds the id of every committed version (see below).
        self._requests_complete = True
        self._log_of_changes = ChangeLog(spec.display_name)
        self._context_cache: tuple[int, ContextSnapshot] | None = None
        self._max_parallel_requested = spec.max_parallel
        self._activation = Activation(spec.display_name)  # its lifecycle: see _activation
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._last_checkpoint = 0
        # Checkpoints this activation knows are stored (the one it was restored from on; the
        # I/O thread's, see _compact), and the version below which compaction left no request
        # id in the store: evicting an id below it from _requests keeps them complete.
        self._checkpoints_known: list[int] = [0]
        self._requests_gone_below = 0
        self._stats: dict[str, int] = collections.Counter()
        self._store: Store | None = spec.open_store() if hosting is None else hosting.store
        # A hosted run counts as restarted when its host was (an unloaded run that comes back
        # was not restarted: it left memory on purpose).
        self._restarted = actor_was_restarted() if hosting is None else hosting.restarted and not hosting.creating
        self._epoch: int | None = None  # the run's fencing epoch as this activation took it
        new_run = False  # known to be absent from the store: nothing of it to read back
        if self._store is not None:
            self._activating: concurrent.futures.Future[int] | None = None
            try:
                # Checked before claiming: taking a stored run up would supersede its writer.
                if hosting is not None and hosting.creating:
                    stored = self._store.get_run(self._name)
                    if not self._own_creation(stored):
                        raise ValueError(
                            f"the store already holds a run named {self._name!r}; use Orchestrator.attach({self._name!r}, store=...) "
                            "to resume it"
                        )
                    new_run = stored is None
                self._claim_run(self._store)
                self._activation.enter("claimed")
                if self._activating is not None and not new_run:
                    # A stored run is read only once this activation's epoch is committed:
                    # from then on the writer it supersedes (a host presumed dead but still
                    # alive) cannot commit again, so what is read below is the last version
                    # anybody was acknowledged. Read earlier, that writer could commit more
                    # versions meanwhile, and this activation would serve a stale version
                    # and hit JournalGap on its first write. A new run has nothing to read:
                    # its epoch and its creation share one commit.
                    self._epoch = self._activating.result()
                    self._activation.enter("fenced")
                version, state, requests, changes, checkpoint_version = restore_or_create(
                    self._store, spec, restarted=None if hosting is None else not hosting.creating, new=new_run)
                self._activation.enter("replayed")
                if self._activating is not None and self._epoch is None:  # a new run: fenced by its creation's commit
                    self._epoch = self._activating.result()
                    self._activation.enter("fenced")
            except BaseException:
                if self._activating is not None:
                    concurrent.futures.wait([self._activating])  # settled before the run is let go
                self._let_store_go()  # gives the claim up at once: this run never starts
                raise
            self._committed = self._head = (version, state)
            self._last_checkpoint = checkpoint_version
            self._checkpoints_known = [checkpoint_version]
            for request_id, v in requests:
                self._remember(request_id, v)
            # Every version's request id is in memory (a new run, or a journal replayed from
            # version 1): a request id not in memory was never committed, and checking it
            # needs no store read. Otherwise older ids live only in the store: read them all
            # now when they fit in memory (a run with retention keeps a bounded number), so
            # that a run taken up again does not ask the store for every group of writes.
            self._requests_complete = len(self._requests) == version
            if not self._requests_complete:
                stored_ids = self._store.all_requests(self._name, at_most=_REQUEST_MEMORY)
                if stored_ids is not None:
                    self._requests = collections.OrderedDict(sorted(stored_ids.items(), key=lambda item: item[1]))
                    self._requests_complete = True
            for change in changes:
                self._log_of_changes.append(change)
        # The run's managed agents (subagent and coordinator actors); stored records are
        # loaded (and validated) now, their actors re-created lazily on first use.
        self._agents = AgentRegistry(
            self._name, store=self._store, publish=self._publish_agent, io=self._run_io, caller=spec.caller, log=self._log,
            replica_factory=_replica_factory, stored_records=not new_run,
        )
        # version -> the store future of a staged (not yet durable) write; lets a retried
        # request id wait for durability instead of being acknowledged early (batch mode).
        self._staged: dict[int, asyncio.Future[None]] = {}
        # apply(fn) writes waiting for the drainer, in arrival order (see _drain_fn_writes).
        self._fn_queue: collections.deque[_FnWrite] = collections.deque()
        self._fn_drainer: asyncio.Task[None] | None = None
        self._settling: set[asyncio.Task[None]] = set()  # batch-mode acknowledgements in flight
        if self._restarted:
            self._log.warning("orchestrator restarted; resumed at version %d", self._committed[0])
        self._activation.enter("serving")
        telemetry.actor_started(spec.display_name, self._committed[0])
        if hosting is None:  # a process of its own (on a host, the host froze its start-up)
            freeze_startup_objects()

    @property
    def stage(self) -> Stage | None:
        """Where this activation is in its lifecycle (see ``_activation``)."""
        return self._activation.stage

    @property
    def stages(self) -> tuple[Stage, ...]:
        """Every stage this activation entered, in order."""
        return tuple(self._activation.path)

    @property
    def _closed(self) -> bool:
        """Writes are refused from now on (unloading or closed)."""
        return self._activation.stopped

    async def serve(self, command: WriterCommand[R]) -> R:
        """A dedicated actor's one entry point for its handles: ``command`` run on this writer."""
        return await command.run(self)

    # ------------------------------------------------------------------ reads

    async def version(self) -> int:
        return self._committed[0]

    async def snapshot(self) -> tuple[int, BaseModel]:
        # Safe without a copy: committed states are immutable by construction, and Ray
        # serialises the return value, so the caller always receives its own deep copy.
        return self._committed

    async def context(self) -> ContextSnapshot:
        version, state = self._committed
        if not isinstance(state, AgentState):
            raise TypeError(
                f"context() needs a state that is an AgentState (or a subclass); this orchestrator holds {type(state).__name__}. "
                "Use snapshot() instead."
            )
        cached = self._context_cache
        if cached is None or cached[0] != version:
            cached = (version, ContextSnapshot.of(state, version=version))
            self._context_cache = cached
        return cached[1]

    async def changes(self, after_seq: int | None, since_version: int, timeout: float) -> list[Change]:
        """Committed events after ``after_seq`` (or after version ``since_version`` on the
        first poll), waiting up to ``timeout`` seconds for one to arrive."""
        return await self._log_of_changes.read(after_seq, since_version, self._committed[0], timeout)

    async def max_parallel(self) -> int:
        return self._max_parallel_requested

    async def history(self, since: int, until: int | None) -> list[Change]:
        """Committed changes with ``since < version <= until`` (until None: the last committed)."""
        committed = self._committed[0]
        until = committed if until is None else until
        if until > committed:
            raise ValueError(f"history(until={until}): run {self._spec.display_name!r} is at version {committed}")
        if since >= until:
            return []
        if self._store is None:
            return self._history_in_memory(since, until)
        store, name = self._store, self._name
        return await self._run_io(lambda: read_history(store, name, since, until))

    def _history_in_memory(self, since: int, until: int) -> list[Change]:
        """A run without a store: the changes still held by the in-memory change log."""
        kept = [c.model_copy(update={"seq": 0}) for c in self._log_of_changes.retained() if c.kind != "agent_state"]
        earliest = kept[0].version - 1 if kept else self._committed[0]
        if since < earliest:
            raise HistoryCompacted(self._spec.display_name, since, earliest)
        return [c for c in kept if since < c.version <= until]

    async def state_at(self, version: int) -> BaseModel:
        """The state exactly as committed at ``version``."""
        committed, state = self._committed
        if version > committed:
            raise ValueError(f"version {version} of run {self._spec.display_name!r} is not committed (it is at {committed})")
        if version == committed:
            return state
        if self._store is None:
            raise HistoryCompacted(self._spec.display_name, version, committed)
        store, name, state_type = self._store, self._name, type(state)
        return await self._run_io(lambda: state_at(store, name, state_type, version))

    async def mark_run(self, token: str, facts: dict[str, Any]) -> None:
        """Record facts about the run in its store entry (e.g. ``status`` for ``soloist gc``)."""
        self._check_token(token)
        if self._store is not None:
            store, name = self._store, self._name
            await self._run_io(lambda: store.update_run_metadata(name, facts))

    async def describe(self) -> RunDescription:
        """What another handle needs to work with this run (never the token)."""
        return self._spec.described().model_copy(update={"name": self._name, "max_parallel": self._max_parallel_requested,
                                                         "state_type": type(self._committed[1])})

    async def statistics(self) -> OrchestratorStatistics:
        return OrchestratorStatistics(
            name=self._spec.display_name,
            version=self._committed[0],
            state_type=f"{type(self._committed[1]).__module__}.{type(self._committed[1]).__qualname__}",
            durability=self._spec.durability,
            store=self._spec.store_path,
            applies=self._stats["applies"],
            apply_errors=self._stats["apply_errors"],
            conflicts=self._stats["conflicts"],
            duplicate_requests=self._stats["duplicates"],
            refused_writes=self._stats["refused"],
            max_parallel=self._max_parallel_requested,
            restarted=self._restarted,
            pid=os.getpid(),
            host=self._hosting.holder.get("host") if self._hosting else None,
            epoch=self._epoch,
            node=node_id(),
        )

    # ----------------------------------------------------------------- writes

    @telemetry.measured_apply
    async def apply_fn(self, token: str, request_id: str, fn: Callable[[Any], Any]) -> int:
        self._check_writable(token)
        loop = asyncio.get_running_loop()
        write = _FnWrite(request_id, fn, loop.create_future())
        self._fn_queue.append(write)
        if self._fn_drainer is None or self._fn_drainer.done():
            self._fn_drainer = loop.create_task(self._drain_fn_writes())
        return await write.done

    async def _drain_fn_writes(self) -> None:
        """Run queued ``apply(fn)`` writes in groups: one thread hop per group, one version per fn.

        Pipelined writers would otherwise pay a hop to the fn thread and back each, one at a
        time behind the write lock. Each ``fn`` still runs on its own deep copy of the state
        left by the one before it, is validated, journalled and acknowledged on its own; a
        failing ``fn`` fails only its caller. A group that fails before its writes are staged
        (a store unreachable for the request-id lookup, the fn threads shut down) fails its
        callers with that error; the writes queued after it go on.
        """
        loop = asyncio.get_running_loop()
        while self._fn_queue:
            group: list[_FnWrite] = []
            settle: list[tuple[_FnWrite, Any]] = []
            try:
                acks = await self._run_fn_group(group, settle)
            except BaseException as exc:
                if not isinstance(exc, Exception):  # cancelled: the actor is going away
                    closed = OrchestratorClosed(f"orchestrator {self._spec.display_name!r} is closed")
                    for write in [*group, *self._fn_queue]:
                        _resolve(write.done, error=closed)  # a retry with the same request id gets its outcome
                    self._fn_queue.clear()
                    raise
                settling = {id(write) for write, _ in settle}
                unstaged = [write for write in group if id(write) not in settling]
                self._log.error("a group of %d apply(fn) writes failed before it was journalled: %s",
                                len(unstaged), exc, exc_info=exc)
                for write in unstaged:
                    _resolve(write.done, error=exc)
                await self._settle_fn_writes(settle)  # the retries it had answered already
                continue
            if self._spec.durability == "batch" and settle:  # acknowledged after the group commit; the next group goes on
                task = loop.create_task(self._settle_fn_writes(settle))
                self._settling.add(task)
                task.add_done_callback(self._settling.discard)
                # Group commit: while the disk works on this group, let the next one grow
                # (unless it is full already). Its writes could not be acknowledged before
                # this fsync anyway, and each group costs a thread hop, an append and a
                # settle task: one or two writes a group cost a fifth of the throughput.
                durable = next((ack[3] for ack in reversed(acks) if ack[3] is not None), None)
                if durable is not None and len(self._fn_queue) < _FN_GROUP:
                    await asyncio.wait({durable})

    async def _run_fn_group(
        self, group: list["_FnWrite"], settle: list[tuple["_FnWrite", Any]]
    ) -> list[tuple[int, BaseModel, Change, "asyncio.Future[None] | None"]]:
        """Take the next group off the queue into ``group`` and run it under the write lock:
        answer retries, run the fns on the fn thread, stage the new versions. Adds each write
        to ``settle`` once its outcome is known (settled here unless durability is ``batch``);
        returns the staged acknowledgements."""
        async with self._write_lock:
            group.extend(self._fn_queue.popleft() for _ in range(min(len(self._fn_queue), _FN_GROUP)))
            if self._closed:
                for write in group:
                    _resolve(write.done, error=OrchestratorClosed(f"orchestrator {self._spec.display_name!r} is closed"))
                return []
            known = await self._recorded_many([w.request_id for w in group])  # one store read for the group
            fresh: list[_FnWrite] = []
            seen: set[str] = set()
            for write in group:
                recorded = known.get(write.request_id)
                if recorded is not None or write.request_id in seen:
                    settle.append((write, recorded))  # a retry: answered with the original's version
                    continue
                seen.add(write.request_id)
                fresh.append(write)
            outcomes = await inbox_of(asyncio.get_running_loop()).run_in(
                self._fn_executor, _run_fns, [w.fn for w in fresh], self._head[1], self._store is not None)
            staged: list[tuple[_FnWrite, BaseModel, BaseModel, Any]] = []
            previous = self._head[1]
            for write, outcome in zip(fresh, outcomes):
                if isinstance(outcome, BaseException):
                    self._stats["apply_errors"] += 1
                    _resolve(write.done, error=outcome)
                    continue
                state, diff = outcome
                staged.append((write, state, previous, diff))
                previous = state
            acks = self._stage_group([(state, "fn", None, write.request_id, base, diff)
                                      for write, state, base, diff in staged])
            settle.extend((write, ack) for (write, *_), ack in zip(staged, acks))
            if self._spec.durability != "batch":
                await self._settle_fn_writes(settle)
            return acks

    async def _settle_fn_writes(self, settle: list[tuple["_FnWrite", Any]]) -> None:
        """Acknowledge each staged write once durable (retries: once the original is)."""
        for write, ack in settle:
            try:
                if ack is None or isinstance(ack, int):
                    version = ack if ack is not None else self._requests.get(write.request_id)
                    if version is None:
                        raise RuntimeError(
                            f"request {write.request_id!r} was sent twice at once and its first copy failed; "
                            "nothing was applied for it - retry with a new request id"
                        )
                    version = await self._durable_version(version)
                else:
                    await self._await_durable(ack)
                    version = ack[0]
            except BaseException as exc:
                _resolve(write.done, error=exc)
            else:
                _resolve(write.done, result=version)

    @telemetry.measured_apply
    async def apply_batch(
        self, token: str, request_id: str, transitions: tuple[StateTransition, ...], expected_version: int | None
    ) -> int:
        async def compute(base_version: int, base: BaseModel) -> BaseModel:
            if expected_version is not None and expected_version != base_version:
                self._stats["conflicts"] += 1
                raise VersionConflict(expected_version, base_version)
            if not isinstance(base, AgentState):
                raise TypeError(
                    f"apply_batch needs a state that is an AgentState (or a subclass); this orchestrator holds "
                    f"{type(base).__name__}. Use apply(fn) instead."
                )
            return reduce(base, transitions)

        return await self._write(token, request_id, "batch", transitions, compute)

    async def _write(
        self,
        token: str,
        request_id: str,
        kind: ChangeKind,
        transitions: tuple[StateTransition, ...] | None,
        compute: Callable[[int, BaseModel], Awaitable[BaseModel]],
    ) -> int:
        """One serialised write: dedupe by request id, compute on the head, stage, make durable.

        ``sync``/``exit`` hold the write lock until the entry is durable; ``batch`` releases
        it once the entry is queued, so the next writer's entry joins the same fsync.
        """
        self._check_writable(token)
        async with self._write_lock:
            recorded = await self._recorded(request_id)
            if recorded is not None:
                return await self._durable_version(recorded)
            base_version, base = self._head
            try:
                new_state = await compute(base_version, base)
            except VersionConflict:
                raise
            except BaseException:
                self._stats["apply_errors"] += 1
                raise
            ack = self._stage(new_state, kind, transitions, request_id, base)
            if self._spec.durability != "batch":
                await self._await_durable(ack)
        if self._spec.durability == "batch":
            await self._await_durable(ack)
        return ack[0]

    async def set_max_parallel(self, token: str, n: int) -> int:
        self._check_writable(token)
        self._max_parallel_requested = n
        return n

    async def close(self, token: str) -> None:
        self._check_token(token)
        if self._closed:
            return
        async with self._write_lock:
            if self._closed:  # unloaded or closed while this call waited for the lock
                return
            await self._agents.close_all()  # recorded (and published) while the store is open
            if self._store is not None:
                # Closed by its owner: no copy of a handle brings it back, only an explicit
                # reopen (Orchestrator.attach with its store, RunCore.resume) does.
                store, name = self._store, self._name
                await self._run_io(lambda: store.update_run_metadata(name, {CLOSED_MARK: True}))
            await self._stop_writing()
        self._log.info("closed at version %d", self._committed[0])
        if self._hosting is None:
            self._fn_executor.shutdown(wait=False)
            self._io_executor.shutdown(wait=False)
        # Push this process's metrics now: a dedicated actor's process is killed next, and a
        # host's next periodic push may come after whoever closed the run reads them.
        await telemetry.actor_closing()

    async def unload(self) -> int:
        """Leave memory (a host unloading an idle durable run): checkpoint the last version,
        stop writing the run (its epoch stays, so whoever activates it next supersedes this
        activation) and return that version. The run stays open: the next call to it on its
        host activates it again from the store. Its managed agents' records stay stored."""
        async with self._write_lock:
            if self._closed:
                return self._committed[0]
            await self._stop_writing()
        self._log.info("unloaded at version %d", self._committed[0])
        return self._committed[0]

    async def _stop_writing(self) -> None:
        """Under the write lock: refuse writes from now on, end the change log, checkpoint the
        last version and let the store go (closing and unloading alike)."""
        self._activation.enter("unloading")
        self._log_of_changes.close()
        if self._checkpoint_task is not None:
            await self._checkpoint_task
        store = self._store
        try:
            if store is not None:
                try:
                    await self._run_io(lambda: self._final_checkpoint(store))
                finally:
                    await self._run_io(self._let_store_go)
        finally:
            self._activation.enter("closed")

    async def abandon(self) -> None:
        """Stop at once without writing (a newer activation superseded this one: a checkpoint
        would be refused too). The run's state stays in the store, as the newer one wrote it."""
        if self._activation.stage != "closed":  # a close or unload that was refused has ended it already
            self._activation.enter("closed")
        self._log_of_changes.close()
        self._log.warning("superseded by a newer activation of the run; this one stops")
        await self._run_io(self._let_store_go)

    def idle(self) -> bool:
        """No write queued or settling, and no managed agent working: safe to unload."""
        return (not self._write_lock.locked() and not self._fn_queue and not self._settling and not self._staged
                and all(a.get("lifecycle") not in ("initializing", "running") for a in self._agents.payloads()))

    def _let_store_go(self) -> None:
        """Stop writing the run: a store of its own is closed (which drops its claim); a host's
        shared store only forgets this run's claim and activation."""
        if self._store is None:
            return
        if self._hosting is None:
            self._store.close()
            return
        self._store.deactivate(self._name)
        self._store.release_writer(self._name)

    # ---------------------------------------------------------- managed agents

    async def agent_created(self, agent_id: str, kind: str, config: Any, handle: Any) -> dict[str, Any]:
        """An actor of the run was (re-)created: record ``initializing`` then ``idle``.

        Agent records are the runtime's bookkeeping, not run state (the version does not
        move), so pools and run loops holding read-only handles may report them.
        """
        agent = self._agents.get(agent_id)
        if agent is None or agent.lifecycle not in ("initializing",):
            await self._agents.change(agent_id, "initializing", kind=kind, config=config)  # type: ignore[arg-type]
        return await self._agents.change(agent_id, "idle", config=config, handle=handle)

    async def agent_changed(self, agent_id: str, lifecycle: str, last_error: str | None = None) -> dict[str, Any]:
        """An agent of the run changed lifecycle (running, idle, error, closed)."""
        return await self._agents.change(agent_id, lifecycle, last_error=last_error)  # type: ignore[arg-type]

    async def agents(self) -> list[dict[str, Any]]:
        """Every managed agent of the run, as client payloads."""
        return self._agents.payloads()

    async def agent_handle(self, agent_id: str) -> Any:
        """The live handle of an agent, re-created from its stored record on first use."""
        return await self._agents.ensure(agent_id)

    def _publish_agent(self, payload: dict[str, Any]) -> None:
        self._log_of_changes.append(Change(seq=0, version=self._committed[0], kind="agent_state", at=time.time(), agent=payload))

    def _run_io(self, fn: Callable[[], Any]) -> "asyncio.Future[Any]":
        return asyncio.get_running_loop().run_in_executor(self._io_executor, fn)

    def _final_checkpoint(self, store: Store) -> None:
        """On close: checkpoint the last version so the next attach replays nothing."""
        version, state = self._committed
        if version > self._last_checkpoint and self._spec.checkpoint_every:
            store.put_checkpoint(self._name, version, state.model_dump(mode="json"))
            self._checkpoints_known.append(version)
            self._compact(store, version)
            self._last_checkpoint = version

    def _compact(self, store: Store, version: int) -> int:
        """Drop what the retention window no longer needs (on the I/O thread). Returns a version
        below which the store now holds no request id (0 when it keeps them all)."""
        floor = retention_floor(store, self._name, version, self._spec.keep_versions, self._spec.keep_days)
        if floor is None:
            return 0
        store.compact(self._name, keep_from=floor)
        # The store kept everything from its newest checkpoint at or before the floor. This
        # activation knows every checkpoint from the one it was restored from on, so the newest
        # of those at or before the floor is that checkpoint or an older one: request ids below
        # it are gone.
        gone_below = max((c for c in self._checkpoints_known if c <= floor), default=0)
        self._checkpoints_known = [c for c in self._checkpoints_known if c >= gone_below]
        return gone_below

    # --------------------------------------------------------------- internals

    def _claim_run(self, store: Store) -> None:
        """Become the run's one writer in its store before reading it (``Store.claim_writer``:
        a no-op for a store of one process). Another process writing the run refuses this
        actor at once with ``RunLockedElsewhere`` naming it; a holder on this same cluster is
        an actor of this run being torn down (a live one would have been found by name), so it
        is waited for. Then the run's activation is started (``Store.activate_async``: None
        for a store that does not fence); it is awaited once the run is read."""
        address = cluster_address()
        holder = {"address": address, "node": node_id(), **(self._hosting.holder if self._hosting else {})}
        deadline = time.monotonic() + _PEER_EXIT_SECONDS
        while True:
            try:
                store.claim_writer(self._name, holder=holder, timeout=0.0 if self._hosting else _CLAIM_SECONDS)
                break
            except RunLockedElsewhere as exc:
                if exc.holder.get("address") != address:
                    self._log.warning("refused: %s", exc)
                    raise
                if self._hosting is not None:
                    # A writer of this cluster holds the lock: an activation that is presumed
                    # dead (a stopped host, one Ray restarted). It is superseded below and its
                    # writes are refused by the epoch from then on: no need to wait for it.
                    self._log.warning("taking the run over from %s; its writes are fenced from now on", exc.holder)
                    break
                if time.monotonic() > deadline:
                    self._log.warning("refused: %s", exc)
                    raise
                self._log.info("waiting for the previous actor of this run to exit: %s", exc)
        self._activating = store.activate_async(self._name, holder=holder)

    def _own_creation(self, stored: RunInfo | None) -> bool:
        """Whether a new run may start over what the store holds under its name: nothing, or
        this very creation, committed by an earlier attempt of the same open (its host was
        killed before answering, and Ray or the driver sent the open again). The owner token
        is a secret drawn for each new run: another run's creation never holds it."""
        return stored is None or hmac.compare_digest(stored.owner_token, self._spec.token)

    def _check_token(self, token: str) -> None:
        if not hmac.compare_digest(str(token or ""), self._token):
            self._stats["refused"] += 1
            self._log.warning("refused a write without the owner's token")
            raise WriteRefused(
                f"orchestrator {self._spec.display_name!r} refused a write: writes need the owner's token. "
                "Only the handle that created the orchestrator (or one it delegated with Orchestrator.delegate()) may write; "
                "subagents and coordinators return outputs for the owner to apply."
            )

    def _check_writable(self, token: str) -> None:
        self._check_token(token)
        if self._closed:
            raise OrchestratorClosed(f"orchestrator {self._spec.display_name!r} is closed; attach to it again to write")

    async def _recorded(self, request_id: str) -> int | None:
        version = self._requests.get(request_id)
        if version is None and self._store is not None and not self._requests_complete:
            # A file read: on a thread, not on the event loop every other call waits on.
            version = await asyncio.to_thread(self._store.find_request, self._name, request_id)
        if version is not None:
            self._stats["duplicates"] += 1
            self._log.info("request %s was already committed as version %d; not applied again", request_id, version)
        return version

    async def _recorded_many(self, request_ids: list[str]) -> dict[str, int]:
        """``_recorded`` of a group of request ids: memory first, then one store lookup for the
        rest (none while memory holds every committed request id)."""
        found = {r: self._requests[r] for r in request_ids if r in self._requests}
        missing = [r for r in request_ids if r not in found]
        if missing and self._store is not None and not self._requests_complete:
            found.update(await asyncio.to_thread(self._store.find_requests, self._name, missing))
        for request_id, version in found.items():
            self._stats["duplicates"] += 1
            self._log.info("request %s was already committed as version %d; not applied again", request_id, version)
        return found

    async def _durable_version(self, version: int) -> int:
        """``version`` once it is durable: a retry never gets an earlier acknowledgement
        than the original request (in batch mode it may still be in the group commit)."""
        staged = self._staged.get(version)
        if staged is not None:
            await staged
        return version

    def _remember(self, request_id: str, version: int) -> None:
        self._requests[request_id] = version
        if len(self._requests) > _REQUEST_MEMORY:
            _, evicted = self._requests.popitem(last=False)
            if evicted >= self._requests_gone_below:
                self._requests_complete = False  # the oldest ids are in the store only from now on

    def _stage(
        self,
        new_state: BaseModel,
        kind: ChangeKind,
        transitions: tuple[StateTransition, ...] | None,
        request_id: str,
        base: BaseModel,
    ) -> tuple[int, BaseModel, Change, "asyncio.Future[None] | None"]:
        """Make ``new_state`` the head and queue its journal entry; not yet visible."""
        return self._stage_group([(new_state, kind, transitions, request_id, base, None)])[0]

    def _stage_group(
        self, writes: list[tuple[BaseModel, ChangeKind, tuple[StateTransition, ...] | None, str, BaseModel, Any]]
    ) -> list[tuple[int, BaseModel, Change, "asyncio.Future[None] | None"]]:
        """Stage consecutive writes: each becomes the head in turn; their journal entries go
        to the store in ONE append, so the group shares one durability future (one wake-up of
        this loop when the fsync is done, instead of one per write). A write's last field is
        its diff from ``base`` when the fn thread computed it already (None: computed here)."""
        acks: list[tuple[int, BaseModel, Change, asyncio.Future[None] | None]] = []
        entries = []
        now = time.time()
        for new_state, kind, transitions, request_id, base, diff in writes:
            version = self._head[0] + 1
            change = Change(seq=0, version=version, kind=kind, transitions=transitions, at=now)
            if self._store is not None:
                entries.append(journal_entry(version, request_id, kind, transitions, base, new_state, diff))
            self._head = (version, new_state)
            self._remember(request_id, version)
            self._stats["applies"] += 1
            acks.append((version, new_state, change, None))
        if self._store is None or not entries:
            return acks
        durable = inbox_of(asyncio.get_running_loop()).future_of(self._store.append(self._name, entries))
        for version, *_ in acks:
            self._staged[version] = durable
        return [(version, state, change, durable) for version, state, change, _ in acks]

    async def _await_durable(self, ack: tuple[int, BaseModel, Change, "asyncio.Future[None] | None"]) -> None:
        version, state, change, durable = ack
        if durable is not None:
            try:
                await durable
            except BaseException:
                self._rollback_after_failed_write(version)
                raise
            finally:
                self._staged.pop(version, None)
        self._acked[version] = (state, change)
        while (nxt := self._committed[0] + 1) in self._acked:
            state, change = self._acked.pop(nxt)
            self._committed = (nxt, state)
            self._log_of_changes.append(change)
        self._maybe_checkpoint()

    def _rollback_after_failed_write(self, version: int) -> None:
        # The journal refused this version, so every later staged version is refused too
        # (the store rejects gaps). Fall back to the last durable state.
        self._stats["apply_errors"] += 1
        for request_id, v in list(self._requests.items()):
            if v >= version:
                del self._requests[request_id]
        if self._head[0] >= version:
            self._head = self._committed
        # What reached the file before the failure is unknown: ask the store from now on.
        self._requests_complete = False
        self._log.error("journal write for version %d failed; state stays at version %d", version, self._committed[0])

    def _maybe_checkpoint(self) -> None:
        every = self._spec.checkpoint_every
        # exit mode: a checkpoint would flush the journal kept in memory; close() writes one.
        if self._store is None or not every or self._closed or self._spec.durability == "exit":
            return
        version, state = self._committed
        if version - self._last_checkpoint < every or (self._checkpoint_task and not self._checkpoint_task.done()):
            return
        self._last_checkpoint = version
        store, name = self._store, self._name

        def write() -> int:
            store.put_checkpoint(name, version, state.model_dump(mode="json"))
            self._checkpoints_known.append(version)  # the I/O thread's (one checkpoint at a time)
            return self._compact(store, version)

        async def run() -> None:
            try:
                gone_below = await asyncio.get_running_loop().run_in_executor(self._io_executor, write)
            except Exception:  # the journal still holds everything; recovery just replays more
                self._log.exception("checkpoint at version %d failed; recovery will replay the journal instead", version)
            else:
                self._requests_gone_below = max(self._requests_gone_below, gone_below)

        self._checkpoint_task = asyncio.get_running_loop().create_task(run())


_FN_GROUP = 64  # apply(fn) writes run per thread hop at most


@dataclasses.dataclass
class _FnWrite:
    """One queued ``apply(fn)``: its request id, its function, and its caller's future."""

    request_id: str
    fn: Callable[[Any], Any]
    done: "asyncio.Future[int]"


def _resolve(future: "asyncio.Future[int]", *, result: int | None = None, error: BaseException | None = None) -> None:
    if future.done():  # the caller went away (cancelled)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type]


def _run_fns(
    fns: list[Callable[[Any], Any]], base: BaseModel, diffs: bool
) -> list[tuple[BaseModel, Any] | BaseException]:
    """Run ``fns`` one after another, each on the state the previous successful one left;
    with ``diffs`` (a journalled run) each new state comes with its journal diff, computed
    here off the event loop and dumping each state once (it is the next one's base)."""
    outcomes: list[tuple[BaseModel, Any] | BaseException] = []
    current = base
    dumped = base.model_dump(mode="json") if diffs else None
    for fn in fns:
        try:
            current = _run_fn(fn, current)
        except BaseException as exc:  # handed to that write's caller, whatever it is
            outcomes.append(exc)
            continue
        if dumped is None:
            outcomes.append((current, None))
            continue
        new_dump = current.model_dump(mode="json")
        outcomes.append((current, diff_states(dumped, new_dump)))
        dumped = new_dump
    return outcomes


def _run_fn(fn: Callable[[Any], Any], base: BaseModel) -> BaseModel:
    """Run a user ``fn`` on a private deep copy and return the validated new state.

    ``fn`` may mutate its argument in place, or return a new instance of the state type.
    Re-validating through JSON catches wrong types assigned to fields and values that are not
    JSON-clean (which a durable run could not journal). ``base`` is never touched.
    """
    working = base.model_copy(deep=True)  # frozen records (messages) are shared, not copied
    result = fn(working)
    if inspect.isawaitable(result):
        result = asyncio.run(_await(result))
    if isinstance(result, BaseModel):
        if type(result) is not type(base):
            raise TypeError(f"apply fn returned a {type(result).__name__}; return None or a {type(base).__name__}")
        working = result
    text = clean_json(working)  # refuses nan/inf, which pydantic would turn into null
    # The new state's frozen records that JSON leaves unchanged are the working copy's own
    # instances (mostly the committed state's): a write to a large state builds only what
    # changed, instead of a third full copy of the state beside the committed one.
    shared = shared_records(working)
    del working, result
    return type(base).model_validate_json(text, context=shared.context())


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _replica_factory(caller: Any, skill: str, *, name: str, num_cpus: float) -> Any:
    """The agent registry's way to re-create a subagent: the handoff layer's, with its pool's
    policy and resources (injected: the registry sits below the handoff layer)."""
    return recreate_replica(caller, skill, name=name)
