"""The run host: one Ray actor process that holds many runs' orchestrators.

Each run on a host is an ``OrchestratorActor`` object, exactly as a dedicated actor holds
one: its own write lock (its applies are serialised, atomic, re-validated and journalled as
ever), its own change log and request ids. What the host shares is what a process has once:
the event loop, a few threads for ``fn`` and store I/O (a slow ``fn`` of one run holds one
of them, never the loop, so other runs' reads and writes go on), and one store object per
store file (its group commit then carries the writes of every run of that file).

A run is activated on the first call that needs it: from its ``RunSpec`` when it is new,
else from its store. The host keeps where each run is stored (its ``Reload``) while it holds
the run, loaded or unloaded; a host that Ray restarted holds nothing, answers a call
``RunNotHeld``, and the caller sends it again with the ``Reload`` its handle keeps. Every activation
raises the run's fencing epoch in the store, so an older activation of it can never commit
again. A durable run idle for ``idle_unload_s`` is checkpointed and unloaded: it then costs
the host a line in a table until its next call. A run that is not detached is closed when
the driver that created it exits, also by a host that Ray restarted meanwhile (it reads back
those runs from its records in the cluster, ``_host_records``); a host without runs ends
itself after ``retire_after_s``.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import itertools
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from typing import Any

import cloudpickle
import ray
from pydantic import BaseModel, ConfigDict

from actors.exceptions import OrchestratorClosed, RunHostFull
from actors.orchestrator._actor import Hosting, OrchestratorActor
from actors.orchestrator._commands import Close, Command, HostCall, OpenRun, RunCall
from actors.orchestrator._host_records import HostRecords, RunRecord
from actors.orchestrator._reload import Reload, reload_of
from actors.orchestrator._recovery import CLOSED_MARK, stored_run_spec
from actors.orchestrator.spec import RunSpec
from cluster.connect import actor_was_restarted, ended_jobs, node_id
from cluster.heap import freeze_startup_objects, give_back_freed_memory
from cluster.semaphore import ClusterSemaphore
from cluster.storage import RunNotFound, StoreUnreachable, WriterFenced, check_durability, open_store
from coordinators.exceptions import SoloistError

__all__ = ["RunHostActor", "HostedRunRecord", "HostStatistics", "RunNotHeld", "TicketLost"]

_log = logging.getLogger("soloist.host")
# Threads running runs' fns, shared by every run of the host: made when needed (an idle one is
# reused first) up to this many, so a slow fn holds one thread and the other runs' fns take
# others; each run's fns run one at a time (its write lock), so it never holds two.
_FN_THREADS = 64
_IO_THREADS = 16  # threads of store I/O and activations: a burst of new runs shares each fsync
_BATCH_WAIT_S = 0.25  # how long a batch's answer waits for its slowest call before ticketing it
_TICKET_KEEP_S = 300.0  # an unclaimed outcome of a ticketed call is dropped this long after it ends
_UNLOAD_AT_ONCE = 256  # idle runs unloaded together by a sweep (their checkpoints share commits)
_COLLECT_EVERY_S = 10.0  # while runs keep being unloaded, the heap is collected at most this often


class TicketLost(SoloistError, LookupError):
    """The host holds no outcome for a ticket of ``call_many`` (it restarted meanwhile): the
    caller sends that call again (writes carry request ids, so exactly-once)."""


class RunNotHeld(OrchestratorClosed):
    """The host does not hold the run and the call came without its ``Reload``. A caller that
    has one sends the call again with it (the host then activates the run from its store);
    for any other caller the run is closed."""


class HostedRunRecord(BaseModel):
    """One run as its host sees it (``soloist status``, the runs page)."""

    model_config = ConfigDict(frozen=True)

    name: str
    named: bool
    loaded: bool
    """In memory now (False: unloaded, activated again by its next call)."""
    version: int | None
    """The last committed version when loaded or unloaded here (None: not known)."""
    idle_s: float
    durable: bool


class HostStatistics(BaseModel):
    """A point-in-time report of one host."""

    model_config = ConfigDict(frozen=True)

    name: str
    pid: int
    loaded: int
    unloaded: int
    activations: int
    unloads: int
    restarted: bool
    node: str = ""
    """The id of the Ray node the host runs on (a movable host changes it when its node is lost)."""


@dataclasses.dataclass(slots=True)
class _Slot:
    """A run the host knows: its orchestrator while loaded, and what it needs to reload it.
    An unloaded run costs its host this object (and its name): runs of one store and driver
    share one ``Reload`` (see ``RunHostActor._shared``)."""

    name: str
    named: bool
    reload: Reload | None
    owner_job: str | None
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)  # activation and unloading
    run: OrchestratorActor | None = None
    token: str = ""  # the owner's token, kept to close the run when its driver exits
    scope: str = ""  # the run's semaphore scope, left when the host closes the run itself
    calls: int = 0
    last_used: float = dataclasses.field(default_factory=time.monotonic)
    version: int | None = None
    recorded: bool = False  # its record is in the cluster (a run not detached: see _host_records)
    restored: bool = False  # held again from that record after this host's restart


class RunHostActor:
    """Holds the orchestrators of many runs in one process. Created only by ``actors.orchestrator``."""

    def __init__(self, name: str, idle_unload_s: float, retire_after_s: float) -> None:
        self._name = name
        self._idle_unload_s = idle_unload_s
        self._retire_after_s = retire_after_s
        self._slots: dict[str, _Slot] = {}
        self._reloads: dict[Reload, Reload] = {}  # see _shared
        self._reloads_kept = 16
        self._stores: dict[tuple[str, str], asyncio.Future[Any]] = {}  # store objects, opened or opening
        self._closing: dict[str, set[asyncio.Task[None]]] = {}  # store objects being closed, by file (whatever durability)
        self._store_users: collections.Counter[tuple[str, str]] = collections.Counter()  # loaded runs per store
        self._fn_executor = ThreadPoolExecutor(max_workers=_FN_THREADS, thread_name_prefix="soloist-host-apply")
        self._io_executor = ThreadPoolExecutor(max_workers=_IO_THREADS, thread_name_prefix="soloist-host-io")
        self._holder = {"host": name, "pid": os.getpid()}
        self._restarted = actor_was_restarted()
        self._counts = {"activations": 0, "unloads": 0}
        self._tickets: dict[str, asyncio.Future[tuple[bool, Any]]] = {}  # calls of a batch still running
        self._uncollected = 0  # runs unloaded since the last garbage collection
        self._collected_at = time.monotonic()
        self._ticket_numbers = itertools.count(1)
        self._empty_since = time.monotonic()
        self._keeper: asyncio.Task[None] | None = None
        self._log = logging.LoggerAdapter(_log, {"component": "run-host", "host": name})
        if self._restarted:
            self._log.warning("host restarted: its durable runs are activated again from their stores on their next call")
        self._records = HostRecords(name, self._log)
        # Ray builds an async actor on its event loop: take up the runs recorded by this host's
        # previous process now, not on a first call that may never come.
        self._restoring = asyncio.get_running_loop().create_task(self._restore())
        freeze_startup_objects()

    # ------------------------------------------------------------------ runs

    async def open_run(self, spec: RunSpec, owner_job: str | None, max_runs: int | None = None) -> int:
        """Start a new run here; its version. A run of that name already on this host is
        refused, and so is a run past ``max_runs`` runs on this host (loaded or not)."""
        self._keep()
        spec = spec.on_host()
        held = self._slots.get(spec.name)
        if held is not None and held.restored:
            # Held again from this host's records: this may be its driver's open, sent once
            # more after the restart (its creation committed already), or another run's.
            # Creating it tells the two apart (see OrchestratorActor: only its own creation
            # is taken up); either way the record stands.
            async with held.lock:
                if held.run is None:
                    await self._activate(held, spec, creating=True)
                elif held.token != spec.token:
                    raise self._taken(spec.name)
            return held.version or 0
        if held is not None:
            raise self._taken(spec.name)
        if max_runs is not None and len(self._slots) >= max_runs:
            raise RunHostFull(
                f"run {spec.name!r} was not started: host {self._name} holds {len(self._slots):,} runs, its limit "
                f"(SOLOIST_HOST_MAX_RUNS={max_runs}); close finished runs, raise the limit, or spread runs over more "
                "hosts (SOLOIST_RUN_HOSTS)"
            )
        reload = self._shared(reload_of(spec, owner_job))
        slot = _Slot(spec.name, spec.named, reload, owner_job)
        self._slots[spec.name] = slot
        try:
            async with slot.lock:
                await self._activate(slot, spec, creating=True)
        except BaseException:
            if self._slots.get(spec.name) is slot:
                self._slots.pop(spec.name)
                self._unrecord(slot)
            raise
        return slot.version or 0

    def _taken(self, run: str) -> ValueError:
        return ValueError(f"a run named {run!r} is already running on host {self._name}; "
                          f"use Orchestrator.attach({run!r}) to get a handle")

    async def call_one(self, call: HostCall) -> Any:
        """One call (a ``RunCall`` or an ``OpenRun``) as a Ray call of its own, in ONE argument:
        Ray serialises each argument of a call on its own, and several cost a lone call 0.05 to
        0.2 ms more than one does on this 2-core machine."""
        match call:
            case RunCall(run, reload, command):
                return await self._run_command(run, reload, command)
            case OpenRun(spec, owner_job, max_runs):
                return await self.open_run(spec, owner_job, max_runs)
        raise TypeError(f"a run host takes a RunCall or an OpenRun (actors.orchestrator._commands), not {type(call).__name__}")

    async def _run_command(self, run: str, reload: Reload | None, command: Command[Any]) -> Any:
        """Run ``command`` on the run's orchestrator, activating it first if it is not loaded.
        Only a ``Command`` reaches a run: the host's housekeeping (unloading, abandoning) has none."""
        if not isinstance(command, Command):
            raise TypeError(f"a run takes a Command (actors.orchestrator._commands), not {type(command).__name__}")
        self._keep()
        slot = self._slots.get(run)
        if slot is None:
            if reload is None:
                raise RunNotHeld(
                    f"orchestrator {run!r} is not running on host {self._name} (it was closed, or it had no store "
                    "and its host restarted)"
                )
            slot = self._slots.setdefault(run, _Slot(run, reload.named, self._shared(reload.model_copy(update={"reopen": False})),
                                                     reload.owner_job))
        slot.calls += 1
        try:
            orchestrator = slot.run
            if orchestrator is None or slot.lock.locked():  # (re)activating or unloading: wait for it
                try:
                    orchestrator = await self._reactivate(slot, reopen=reload is not None and reload.reopen)
                except (LookupError, OrchestratorClosed):
                    if isinstance(command, Close):
                        return None  # a run deleted or closed meanwhile: closing it is done
                    raise
            try:
                result = await command.run(orchestrator)
                if isinstance(command, Close) and self._slots.get(run) is slot:
                    self._forget(slot)  # closed by its owner: the run is no longer this host's
                return result
            except WriterFenced:
                # A newer activation holds the run: this one never writes again. The next call
                # activates the run anew (superseding that one) from what the store holds.
                if slot.run is orchestrator:
                    slot.run = None
                    await orchestrator.abandon()
                    self._give_store(slot.reload)
                raise
        finally:
            slot.calls -= 1
            slot.last_used = time.monotonic()

    async def call_many(self, calls: list[HostCall]) -> list[tuple[bool | None, Any]]:
        """Many calls in one Ray call: what one driver's event loop sent this host in one turn
        (each a ``RunCall`` or an ``OpenRun``). Each runs as its own task, as separate calls would; the outcome of each,
        in order, is ``(True, value)`` or ``(False, error)``. A call still running after
        ``_BATCH_WAIT_S`` comes back as ``(None, ticket)`` for ``outcomes`` to answer, so a
        slow call never holds the others' answers for longer than that."""
        return await self._answer([asyncio.ensure_future(self._outcome_of(call)) for call in calls], None)

    async def outcomes(self, tickets: list[str]) -> list[tuple[bool | None, Any]]:
        """The outcomes of calls ``call_many`` answered with tickets, as ``call_many`` answers:
        those done within ``_BATCH_WAIT_S``, and the tickets of the others again. A ticket this
        host does not hold (it restarted) is answered with ``TicketLost``."""
        held = [self._tickets.get(ticket) for ticket in tickets]
        return await self._answer(held, tickets)

    async def _answer(self, tasks: list[asyncio.Future[tuple[bool, Any]] | None], tickets: list[str] | None) -> list[tuple[bool | None, Any]]:
        live = [task for task in tasks if task is not None]
        if live:
            await asyncio.wait(live, timeout=_BATCH_WAIT_S)
        answers: list[tuple[bool | None, Any]] = []
        for i, task in enumerate(tasks):
            ticket = tickets[i] if tickets is not None else None
            if task is None:
                answers.append((False, TicketLost(f"host {self._name} holds no call {ticket!r} (it restarted meanwhile)")))
            elif task.done():
                if ticket is not None:
                    self._tickets.pop(ticket, None)
                answers.append(task.result())
            else:
                if ticket is None:
                    ticket = f"{self._name}:{next(self._ticket_numbers)}"
                    self._tickets[ticket] = task
                    # Unclaimed (its driver went away): dropped a while after it ends.
                    task.add_done_callback(self._drop_ticket_later(ticket))
                answers.append((None, ticket))
        return answers

    def _drop_ticket_later(self, ticket: str) -> Callable[[asyncio.Future[tuple[bool, Any]]], None]:
        def drop(_: asyncio.Future[tuple[bool, Any]]) -> None:
            asyncio.get_running_loop().call_later(_TICKET_KEEP_S, self._tickets.pop, ticket, None)

        return drop

    async def _outcome_of(self, call: HostCall) -> tuple[bool, Any]:
        try:
            return True, await self.call_one(call)
        except Exception as exc:  # the caller's own error, delivered to it alone
            return False, _portable(exc)

    async def drop_run(self, run: str) -> None:
        """Forget a run that was closed (its orchestrator's ``close`` already ran); idempotent."""
        slot = self._slots.get(run)
        if slot is not None:
            self._forget(slot)

    def _forget(self, slot: _Slot) -> None:
        if self._slots.get(slot.name) is slot:
            self._slots.pop(slot.name)
            self._unrecord(slot)
        if slot.run is not None:
            slot.run = None
            self._give_store(slot.reload)
        self._note_empty()

    def _shared(self, reload: Reload | None) -> Reload | None:
        """The one ``Reload`` object equal to ``reload`` that this host's slots share (the
        thousands of runs of one store and driver need one); those no slot uses any more are
        dropped when the table has doubled since it was last pruned (``_prune_reloads``)."""
        if reload is None:
            return None
        return self._reloads.setdefault(reload, reload)

    def _prune_reloads(self) -> None:
        if len(self._reloads) > 2 * self._reloads_kept:
            self._reloads = {r: r for r in (s.reload for s in self._slots.values()) if r is not None}
            self._reloads_kept = max(16, len(self._reloads))

    def _unrecord(self, slot: _Slot) -> None:
        if slot.recorded:
            slot.recorded = False
            self._records.delete(slot.name)

    async def _restore(self) -> None:
        """Hold again, unloaded, the runs this host recorded before Ray restarted it (or before
        it ended without closing them), so the sweep closes those whose driver has exited."""
        try:
            records = await self._records.load()
        except Exception:  # the runs stay recorded: the host's next start reads them again
            self._log.exception("reading this host's run records failed; runs of exited drivers may stay open")
            return
        restored = 0
        for run, record in records.items():
            if run not in self._slots:  # a call may have brought it back already
                self._slots[run] = _Slot(run, record.named, self._shared(record.reload), record.owner_job, scope=record.scope,
                                         recorded=True, restored=True)
                restored += 1
        if restored:
            self._log.info("holding again %d runs recorded before this host's restart; each is closed once its "
                           "driver has exited", restored)
            self._keep()

    async def unload_run(self, run: str) -> bool:
        """Unload the run now if it is durable and idle (what the idle sweep does after
        ``idle_unload_s``); True if it is unloaded after this call."""
        slot = self._slots.get(run)
        if slot is None:
            return False
        await self._unload(slot)
        return slot.run is None

    async def has_run(self, run: str) -> bool:
        """Whether this host holds ``run`` (loaded or unloaded)."""
        return run in self._slots

    async def runs(self, offset: int = 0, limit: int | None = None) -> list[HostedRunRecord]:
        """The runs of this host, by name, a page of them."""
        now = time.monotonic()
        names = sorted(self._slots)[offset: None if limit is None else offset + limit]
        records = []
        for name in names:
            slot = self._slots[name]
            version = slot.version if slot.run is None else await slot.run.version()
            records.append(HostedRunRecord(name=name, named=slot.named, loaded=slot.run is not None, version=version,
                                           idle_s=0.0 if slot.calls else now - slot.last_used, durable=slot.reload is not None))
        return records

    async def statistics(self) -> HostStatistics:
        loaded = sum(1 for s in self._slots.values() if s.run is not None)
        return HostStatistics(name=self._name, pid=os.getpid(), loaded=loaded, unloaded=len(self._slots) - loaded,
                              activations=self._counts["activations"], unloads=self._counts["unloads"],
                              restarted=self._restarted, node=node_id() or "")

    # ------------------------------------------------------------- internals

    async def _reactivate(self, slot: _Slot, *, reopen: bool = False) -> OrchestratorActor:
        """Activate the slot's run from its store. An activation that fails (the run deleted or
        closed, its store damaged or held by another cluster) leaves nothing of the run here:
        its next call tries afresh, a new run of its name may start, the host may retire. Only
        a store out of reach for now keeps the slot (and the owner job it carries)."""
        async with slot.lock:
            if slot.run is not None:
                return slot.run
            if self._slots.get(slot.name) is not slot:  # forgotten while this call waited
                raise RunNotHeld(f"orchestrator {slot.name!r} is not running on host {self._name}")
            if slot.reload is None:
                self._forget(slot)
                raise OrchestratorClosed(f"orchestrator {slot.name!r} is not running on host {self._name}")
            reload = slot.reload
            try:
                store = await self._take_store(reload)
                try:
                    spec = await asyncio.get_running_loop().run_in_executor(
                        self._io_executor, functools.partial(stored_run_spec, store, slot.name, reload.durability, reopen=reopen))
                finally:
                    self._give_store(reload)
                return await self._activate(slot, spec.model_copy(update={"store": reload.store}), creating=False)
            except BaseException as exc:
                if not isinstance(exc, StoreUnreachable) and slot.run is None and self._slots.get(slot.name) is slot:
                    self._forget(slot)
                    self._log.warning("run %s could not be activated and is no longer held here: %r", slot.name, exc)
                raise

    async def _activate(self, slot: _Slot, spec: RunSpec, *, creating: bool) -> OrchestratorActor:
        """Build the run's orchestrator (it claims the run and raises its epoch in the store).
        A run its driver's exit must close is recorded in the cluster first."""
        if slot.owner_job is not None and not slot.recorded:
            await self._records.put(slot.name, RunRecord(owner_job=slot.owner_job, named=slot.named,
                                                         scope=spec.semaphore_scope or "", reload=slot.reload))
            slot.recorded = True
        if slot.reload is not None:
            store = await self._take_store(slot.reload)
        else:  # a store object (opened already) or none
            store = await asyncio.get_running_loop().run_in_executor(self._io_executor, spec.open_store)
        hosting = Hosting(store=store, fn_executor=self._fn_executor, io_executor=self._io_executor, holder=self._holder,
                          creating=creating, restarted=self._restarted)
        # Claiming, replaying and creating read and write the store: off the event loop.
        try:
            orchestrator = await asyncio.get_running_loop().run_in_executor(
                self._io_executor, lambda: OrchestratorActor(spec, hosting))
        except BaseException:
            self._give_store(slot.reload)
            raise
        slot.run, slot.token, slot.scope = orchestrator, spec.token, spec.semaphore_scope
        slot.version = await orchestrator.version()
        self._counts["activations"] += 1
        return orchestrator

    async def _unload(self, slot: _Slot) -> None:
        if slot.reload is None or slot.run is None or slot.calls or not slot.run.idle():
            return
        async with slot.lock:
            orchestrator = slot.run
            if orchestrator is None or slot.calls or not orchestrator.idle():
                return
            slot.version = await orchestrator.unload()
            slot.run = None
            self._counts["unloads"] += 1
            self._give_store(slot.reload)

    async def _take_store(self, reload: Reload) -> Any:
        """The store object of ``reload``'s file, opened on first use; counted as used by one
        more run until ``_give_store``. Opened on the I/O threads, never on the event loop
        (an open may wait seconds on the file's write gate, or on a database server): the
        runs that share the file wait for that one opening together, the others go on."""
        key = (reload.store, reload.durability)
        self._store_users[key] += 1
        # Never open a file while this host still closes an object of it (of any durability: each
        # durability has an object of its own): a SQLite connection
        # closing as the file's last one in this process removes the WAL that a connection
        # opened meanwhile would go on writing to (seen: an acknowledged write lost).
        while key not in self._stores and self._closing.get(reload.store):
            await asyncio.wait(set(self._closing[reload.store]))
        opening = self._stores.get(key)
        if opening is None:
            opening = self._stores[key] = asyncio.get_running_loop().run_in_executor(
                self._io_executor, functools.partial(open_store, reload.store, durability=check_durability(reload.durability)))
        try:
            return await asyncio.shield(opening)
        except BaseException:
            self._store_users[key] -= 1
            if self._store_users[key] <= 0:
                del self._store_users[key]
            if self._stores.get(key) is opening:
                if opening.done():  # it failed to open: the next activation opens the file afresh
                    del self._stores[key]
                elif key not in self._store_users:  # this caller went away, and nobody else waits
                    del self._stores[key]
                    self._close_later(key, opening)
            raise

    def _give_store(self, reload: Reload | None) -> None:
        """A run of that file left memory: the last one closes the store object, on the I/O
        threads (the file can then be replaced or removed; the next activation opens it again)."""
        if reload is None:
            return
        key = (reload.store, reload.durability)
        self._store_users[key] -= 1
        if self._store_users[key] <= 0:
            del self._store_users[key]
            self._close_later(key, self._stores.pop(key))

    def _close_later(self, key: tuple[str, str], opening: asyncio.Future[Any]) -> None:
        """Close the store object ``opening`` gives, on the I/O threads; until it is closed, a
        new activation of that file waits for it (see ``_take_store``)."""
        file = key[0]
        closing = asyncio.get_running_loop().create_task(self._close_opened(opening))
        self._closing.setdefault(file, set()).add(closing)
        closing.add_done_callback(lambda done: self._closed(file, done))

    def _closed(self, file: str, done: asyncio.Task[None]) -> None:
        still = self._closing.get(file, set())
        still.discard(done)
        if not still:
            self._closing.pop(file, None)

    async def _close_opened(self, opening: asyncio.Future[Any]) -> None:
        try:
            store = await opening
        except BaseException:  # never opened: nothing to close (its opener reported the error)
            return
        try:
            await asyncio.get_running_loop().run_in_executor(self._io_executor, store.close)
        except Exception as exc:  # the file is let go either way; the next activation opens it again
            self._log.error("closing a store object failed: %r", exc)

    def _keep(self) -> None:
        """Start the sweep (unloading, owners, retiring) with the host's first call."""
        if self._keeper is None:
            self._keeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    def _note_empty(self) -> None:
        if not self._slots:
            self._empty_since = time.monotonic()

    async def _sweep_forever(self) -> None:
        while True:
            delays = [self._idle_unload_s, self._retire_after_s, *(self._unload_after(s) for s in self._slots.values())]
            await asyncio.sleep(max(0.05, min(min(delays) / 4, 2.0)))
            try:
                await self._sweep()
            except Exception:  # the next sweep tries again; a failing unload leaves the run loaded
                self._log.exception("host sweep failed")

    def _unload_after(self, slot: _Slot) -> float:
        chosen = slot.reload.unload_after_s if slot.reload is not None else None
        return self._idle_unload_s if chosen is None else chosen

    async def _sweep(self) -> None:
        now = time.monotonic()
        unloaded = 0
        due = [s for s in self._slots.values()
               if s.run is not None and not s.calls and now - s.last_used >= self._unload_after(s)]
        # Many at once: their checkpoints share the store's group commits. One by one (an fsync
        # each), a host unloaded fewer runs per second than a driver can open, so its loaded
        # runs, each holding its lock file open, grew until the process ran out of descriptors.
        for start in range(0, len(due), _UNLOAD_AT_ONCE):
            batch = due[start:start + _UNLOAD_AT_ONCE]
            for slot, outcome in zip(batch, await asyncio.gather(*(self._unload(s) for s in batch), return_exceptions=True)):
                if isinstance(outcome, BaseException):  # it stays loaded; the next sweep tries again
                    self._log.error("unloading run %s failed: %r", slot.name, outcome)
            unloaded += sum(1 for slot in batch if slot.run is None)
        self._uncollected += unloaded
        if self._uncollected and (not unloaded or now - self._collected_at >= _COLLECT_EVERY_S):
            # Give what the unloaded runs used back to the OS now, not at some later allocation:
            # once a burst of unloads is over, and every _COLLECT_EVERY_S during a long one (a
            # full collection of a heap holding thousands of runs costs a good part of a second).
            give_back_freed_memory()
            self._uncollected, self._collected_at = 0, time.monotonic()
        self._prune_reloads()
        owners = {s.owner_job for s in self._slots.values() if s.owner_job is not None}
        if owners:
            ended = await asyncio.get_running_loop().run_in_executor(self._io_executor, ended_jobs, owners)
            for slot in [s for s in self._slots.values() if s.owner_job in ended]:
                await self._close_orphan(slot)
        if not self._slots and self._restoring.done() and now - self._empty_since >= self._retire_after_s:
            await self._retire()

    async def _close_orphan(self, slot: _Slot) -> None:
        """The driver that created this (not detached) run exited: close the run, as Ray ends
        a dedicated orchestrator actor with its job. An unloaded run is marked closed in its
        store without being activated."""
        self._log.info("run %s: its driver exited; closing it", slot.name)
        async with slot.lock:
            if slot.run is not None:
                await slot.run.close(slot.token)
            elif slot.reload is not None:
                await self._mark_closed(slot.name, slot.reload)
        self._forget(slot)
        if slot.scope:
            # As its owner's close() would: the scope's table goes once no run uses it (the
            # scope watches the host's liveness, and the host outlives the driver).
            await ClusterSemaphore.leave_run(slot.scope, slot.name)

    async def _mark_closed(self, run: str, reload: Reload) -> None:
        store = await self._take_store(reload)
        try:
            await asyncio.get_running_loop().run_in_executor(
                self._io_executor, lambda: store.update_run_metadata(run, {CLOSED_MARK: True}))
        except RunNotFound:
            pass  # the run was deleted from its store meanwhile: nothing is left to close
        finally:
            self._give_store(reload)

    async def _retire(self) -> None:
        self._log.info("no run for %.0fs; ending", self._retire_after_s)
        await self._records.clear()  # after every deletion asked for before: none is left behind
        for opening in self._stores.values():  # a host retires with no run: none is still opening
            if opening.done() and not opening.cancelled() and opening.exception() is None:
                opening.result().close()
        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)


def _portable(exc: Exception) -> Exception:
    """``exc`` if it survives pickling back to its caller; else a ``RuntimeError`` naming it
    (one unpicklable error must not fail the answers of the whole batch)."""
    try:
        cloudpickle.dumps(exc)
    except Exception as problem:  # what cloudpickle raises varies with the object
        return RuntimeError(f"{type(exc).__name__}: {exc} (the error itself cannot be sent back: {problem})")
    return exc
