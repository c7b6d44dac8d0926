"""The Ray actor that holds the lease tables of many scopes (one ``ScopeEntry`` each).

A few of these serve the whole cluster (see ``_placement``): one process per scope would
cost ten thousand processes for ten thousand runs. Each call names its scope (a
``ScopeKey``); scopes share nothing but the actor's lock, its sweep thread and its pings.

Ray runs each concurrency group of an async actor on its own event loop thread, so the
tables are guarded by one ``threading.Lock`` (never held across an ``await``). One daemon
thread sweeps every scope that holds or awaits leases, so expiries and the end of recovery
take effect even when no call arrives; it probes the holders of guarded leases that missed
their renewals (one probe per holder, whatever the scopes of its leases: through Ray, an
answer or Ray's verdict that the holder died), and pings the actors of attached runs (each
distinct actor once per round, however many runs it hosts). A requester that saw its
subagent lost reports it (``suspect``) and the sweep probes that holder at once; the report
itself frees nothing.

The sweep waits on the futures of its calls (``ObjectRef.future``), never with ``ray.get``:
in an async actor's process Ray warns about a blocking ``ray.get`` from any thread.

Restart: the tables live in memory. A restarted service knows no scope; each call carries
its scope's configuration, and a table made within ``ttl_s`` of the restart starts
``recovering`` until then (the renewals of live holders re-register their leases before
anything new is granted). That holds for a scope created anew in that window too: the
service cannot tell it from one it lost, and the cap comes first. Runs from before are
unknown: a table rebuilt by a call other than a run's join never retires on its own.

Budgets: a scope may have a ``Budget`` (requests and tokens per sliding window, see
``_budget``): its table then grants the head of the queue only when the window has room,
and the window's charges are kept in the cluster's key-value store as they change
(``_budget_records``), so a restarted service (or the scope opened anew) starts from the
window as it was, not from an empty one. The sweep wakes when a charge leaves a window
that a waiting grant needs.

A holder paused past that window (SIGSTOP, a swapped-out node) cannot renew in time, yet its
work goes on when it resumes. So the owners of guarded leases are also recorded outside the
service, in the cluster's key-value store (one key per owner, written before its first lease
is granted, deleted once it holds nothing): a restarted service asks each recorded owner to
renew its leases (``renew_leases``) and keeps every table recovering until each has answered
or Ray says it died, however long that takes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import Counter, OrderedDict
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, RayActorError

from cluster.connect import actor_was_restarted
from cluster.semaphore._owner_records import OwnerRecords
from cluster.heap import freeze_startup_objects
from cluster.semaphore._budget import BudgetWindow
from cluster.semaphore._budget_records import BudgetRecords
from cluster.semaphore._lease_table import LeaseTable, Outcome
from cluster.semaphore._scope import Detached, ScopeConfig, ScopeEntry, ScopeGone, ScopeKey

__all__ = ["SemaphoreService", "MAX_DROPPED"]

logger = logging.getLogger(__name__)
_LOG_EXTRA = {"component": "cluster-semaphore"}

MAX_DROPPED = 100_000
"""How many dropped scope names a service remembers (so a stale call does not rebuild one)."""

_Renewal = tuple[ScopeKey, list[tuple[Any, ...]]]


@ray.remote(concurrency_groups={"acquire": 100_000, "control": 64, "watch": 100_000})  # type: ignore[call-overload]  # Ray's stubs omit concurrency_groups
class SemaphoreService:
    """Holds the ``LeaseTable`` of every scope placed on it. Parked acquires run in the
    ``acquire`` group and contention watches in ``watch``, so release, renew and statistics
    (``control``) never queue behind them."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._restarted = actor_was_restarted()
        self._started = time.monotonic()
        # Guards every field below; held only for short, non-awaiting sections.
        self._lock = threading.Lock()
        # scope -> its entry. Every call naming a scope not here gets ScopeGone, unless it
        # may (re)build the table (see ``_entry``).
        self._scopes: dict[str, ScopeEntry] = {}
        # Scopes dropped by this incarnation, oldest first (bounded): never rebuilt by a
        # call that could only rebuild after a restart.
        self._dropped: OrderedDict[str, None] = OrderedDict()
        # ttl_s -> how many scopes have it; the smallest paces the sweep.
        self._ttls: Counter[float] = Counter()
        # holder -> the actor that holds its guarded leases (asked when they miss renewals);
        # each also recorded in the cluster's key-value store while it is here.
        self._owners: dict[str, Any] = {}
        self._records = OwnerRecords(name)
        # After a restart: the owners recorded before it that have not answered since
        # (holder -> actor). While any is left, every table stays recovering.
        self._awaiting: dict[str, Any] = self._records.load() if self._restarted else {}
        if not self._restarted:
            self._records.clear()  # a new service: no lease from before it can be held
        # The renew_leases calls out to awaited owners: future -> (its ref, holder).
        self._renewing: dict[concurrent.futures.Future[Any], tuple[Any, str]] = {}
        # Probes out: the future of the call -> (its ref, kept alive until answered; holder;
        # (scope, lease id) asked about; when it was sent).
        self._probes: dict[concurrent.futures.Future[Any], tuple[Any, str, list[tuple[str, str]], float]] = {}
        # Actors of attached runs: actor id -> (handle, the (scope, run) pairs it hosts).
        self._run_actors: dict[str, tuple[Any, set[tuple[str, str]]]] = {}
        # Set by ``suspect``: the sweep wakes at once to send the probes it made due.
        self._kick = threading.Event()
        threading.Thread(target=self._sweep_forever, name=f"sem-sweep:{name}", daemon=True).start()
        if self._restarted:
            logger.warning("semaphore service %s restarted: its tables are rebuilt as calls name them; "
                           "%d owners of guarded leases asked to renew first", name, len(self._awaiting),
                           extra=_LOG_EXTRA)
        freeze_startup_objects()

    # ------------------------------------------------------------------ scopes

    @ray.method(concurrency_group="control")
    async def open_scope(self, key: ScopeKey) -> ScopeConfig | None:
        """``(permits, ttl_s, budget)`` of the scope, created when missing if ``key`` may
        create it (or rebuilt after a restart); None when the service holds no table for it."""
        with self._lock:
            try:
                entry = self._entry(key)
            except ScopeGone:
                return None
            return entry.config()

    @ray.method(concurrency_group="control")
    async def config(self, scope: str) -> ScopeConfig | None:
        """``(permits, ttl_s, budget)`` of the scope, or None when the service holds no table for it."""
        with self._lock:
            entry = self._scopes.get(scope)
            return None if entry is None else entry.config()

    @ray.method(concurrency_group="control")
    async def destroy_scope(self, scope: str) -> bool:
        """Drop the scope's table whatever it holds; False if there was none."""
        with self._lock:
            if scope not in self._scopes:
                return False
            entry = self._scopes[scope]
            self._drop(scope, "destroyed")
            if entry.records is not None:
                entry.records.clear()
            return True

    # ------------------------------------------------------------------ leases

    @ray.method(concurrency_group="acquire")
    async def acquire(
        self, key: ScopeKey, lease_id: str, holder: str, limit: int, timeout: float | None, owner: Any = None,
        tokens: int | None = None,
    ) -> tuple[Outcome, int, float]:
        """Park until granted; returns (``granted``/``timeout``/``withdrawn``, generation,
        seconds the scope's budget held the grant back).

        ``owner``: the actor that will hold the lease and run the work it admits; the lease
        is then guarded (see ``LeaseTable``). ``tokens``: what to reserve from the scope's
        budget (None: the budget's default reservation); ``BudgetConfigError`` when that
        could never be granted.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._entry(key)
            if entry.retired:
                return "withdrawn", 0, 0.0
            table = entry.table
            if table.budget is not None:
                table.budget.check_fits(tokens)
            if owner is not None:
                self._know_owner(holder, owner)
            outcome, decided = table.request(lease_id, holder, limit, time.monotonic(), guarded=owner is not None,
                                             tokens=tokens)
            entry.wake(decided)
            if outcome != "parked" or timeout == 0:
                if outcome == "parked":
                    outcome, decided = table.give_up(lease_id, time.monotonic())
                    entry.wake(decided)
                return outcome, table.generation_of(lease_id) or 0, table.take_budget_wait(lease_id)
            fut: asyncio.Future[Outcome] = loop.create_future()
            entry.park(lease_id, loop, fut)
            if table.budget_wake_at(time.monotonic()) is not None:
                self._kick.set()  # the sweep wakes when the window has room, not an interval later
        try:
            outcome = await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            with self._lock:
                entry.forget(lease_id, fut)
                outcome, decided = entry.table.give_up(lease_id, time.monotonic())
                entry.wake(decided)
        except asyncio.CancelledError:
            # The reply will never reach the caller: free whatever this request holds.
            with self._lock:
                entry.forget(lease_id, fut)
                _, decided = entry.table.release(lease_id, time.monotonic())
                entry.wake(decided)
                self._drop_if_done(entry)
            raise
        with self._lock:
            return outcome, entry.table.generation_of(lease_id) or 0, entry.table.take_budget_wait(lease_id)

    @ray.method(concurrency_group="control")
    async def release(self, key: ScopeKey, lease_id: str, used_tokens: int | None = None) -> bool:
        """Free a lease or withdraw a parked request; False if unknown (idempotent).
        ``used_tokens``: the usage the lease's work reported (settles its budget charge)."""
        with self._lock:
            entry = self._entry(key)
            released, decided = entry.table.release(lease_id, time.monotonic(), used_tokens)
            entry.wake(decided)
            if entry.table.budget_wake_at(time.monotonic()) is not None:
                self._kick.set()
            self._drop_if_done(entry)
        return released

    @ray.method(concurrency_group="control")
    async def renew(self, renewals: list[_Renewal], owner: Any = None) -> list[list[bool]]:
        """Extend leases by their scope's ``ttl_s``, per scope; False for each lease that is
        no longer held (all of a scope the service holds no table for)."""
        answers: list[list[bool]] = []
        with self._lock:
            now = time.monotonic()
            for key, leases in renewals:
                try:
                    entry = self._entry(key)
                except ScopeGone:
                    answers.append([False] * len(leases))
                    continue
                if owner is not None:
                    for item in leases:
                        self._know_owner(item[1], owner)
                results, decided = entry.table.renew(leases, now)
                entry.wake(decided)
                answers.append(results)
        return answers

    @ray.method(concurrency_group="control")
    async def suspect(self, scope: str, owner: Any) -> int:
        """A requester's call to ``owner`` (an actor holding guarded leases of ``scope``)
        failed: probe its leases now rather than once they miss their renewals. The word
        frees nothing: only the probe's answer (Ray's verdict that the process died, or a
        restarted process that does not hold them) does; an alive owner's answer renews
        them. Every scope of this service is checked (one probe per holder serves them
        all). Returns how many leases are being checked."""
        with self._lock:
            holders = [holder for holder, known in self._owners.items() if known == owner]
            now = time.monotonic()
            suspects = 0
            for entry in self._scopes.values():
                count, decided = entry.table.suspect(holders, now)
                entry.wake(decided)
                suspects += count
        if suspects:
            logger.info(
                "semaphore %r: %d leases of a holder reported lost; asking Ray about it now",
                scope, suspects, extra=_LOG_EXTRA,
            )
            self._kick.set()
        return suspects

    @ray.method(concurrency_group="watch")
    async def watch(self, key: ScopeKey, contended: bool) -> bool:
        """Whether requests are waiting; parks while that is still ``contended``."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._entry(key)
            now_contended = entry.table.waiting > 0
            if now_contended != contended:
                return now_contended
            fut: asyncio.Future[bool] = loop.create_future()
            entry.watchers.append((contended, loop, fut))
        try:
            return await fut
        finally:
            with self._lock:
                entry.watchers = [w for w in entry.watchers if w[2] is not fut]

    @ray.method(concurrency_group="control")
    async def statistics(self, key: ScopeKey) -> dict[str, object]:
        """Report one scope's table (the fields of ``SemaphoreStatistics``)."""
        with self._lock:
            entry = self._entry(key)
            entry.wake(entry.table.tick(time.monotonic()))
            return {**entry.statistics(), "service": self._name}

    @ray.method(concurrency_group="control")
    async def reset_peak(self, key: ScopeKey) -> None:
        """Restart the scope's ``max_held`` from its current ``held``."""
        with self._lock:
            self._entry(key).table.reset_peak()

    @ray.method(concurrency_group="control")
    async def service_statistics(self) -> dict[str, object]:
        """Report the service (the fields of ``ServiceStatistics``)."""
        with self._lock:
            entries = list(self._scopes.values())
            return {
                "name": self._name,
                "scopes": len(entries),
                "retired": sum(1 for e in entries if e.retired),
                "runs": sum(len(e.runs) for e in entries),
                "run_actors": len(self._run_actors),
                "held": sum(e.table.held for e in entries),
                "waiting": sum(e.table.waiting for e in entries),
                "owners": len(self._owners),
                "probes": len(self._probes),
                "restarted": self._restarted,
            }

    # -------------------------------------------------------------------- runs

    @ray.method(concurrency_group="control")
    async def attach_run(self, key: ScopeKey, run: str, orchestrator: Any) -> ScopeConfig:
        """Record that ``run`` (its actor ``orchestrator``) uses the scope, created with the
        key's configuration if missing; a retired scope serves again. Returns the scope's
        ``(permits, ttl_s, budget)``, whatever the key asked for (a run joins the scope as it is)."""
        # ActorHandle has no public id accessor; _actor_id is stable across Ray releases.
        actor_id = orchestrator._actor_id.hex()
        with self._lock:
            entry = self._entry(key)
            previous = entry.attach(run, actor_id)
            if previous is not None and previous != actor_id:
                self._unlink(previous, entry.scope, run)
            _, hosted = self._run_actors.setdefault(actor_id, (orchestrator, set()))
            hosted.add((entry.scope, run))
            return entry.config()

    @ray.method(concurrency_group="control")
    async def detach_run(self, scope: str, run: str) -> Detached | None:
        """``run`` stopped using the scope (it was closed); see ``Detached``. None when the
        service holds no table for the scope."""
        with self._lock:
            entry = self._scopes.get(scope)
            if entry is None:
                return None
            actor_id = entry.runs.get(run)
            if actor_id is not None:
                self._unlink(actor_id, scope, run)
            outcome = entry.detach(run, time.monotonic(), "its last run was closed")
            self._drop_if_done(entry)
            return outcome

    # --------------------------------------------------------------- internals

    def _entry(self, key: ScopeKey) -> ScopeEntry:
        """The scope's entry (caller holds the lock). Missing, it is created when the key may
        create it, or rebuilt when this service restarted and never dropped it itself;
        otherwise ``ScopeGone``."""
        entry = self._scopes.get(key.scope)
        if entry is not None:
            return entry
        if key.create:
            rebuilt = False
        elif self._restarted and key.scope not in self._dropped:
            rebuilt = True
        else:
            raise ScopeGone(key.scope)
        now = time.monotonic()
        # Rebuilt within ttl_s of the restart: recover until then (as a restarted actor of
        # its own would), so leases from before are re-registered before anything is granted.
        # Or at any time while an owner from before the restart has not answered.
        recovering = self._restarted and (now < self._started + key.ttl_s or bool(self._awaiting))
        records = window = None
        budget = key.budget
        if budget is None and self._restarted:
            # Made after a restart by a call that carries no budget (a run joining its scope): the
            # one recorded before, if any, so a budgeted scope never comes back without its budget.
            budget = BudgetRecords(key.scope).budget()
        if budget is not None:
            # The window as it was: a restart (or the scope opened anew) does not reset it.
            records = BudgetRecords(key.scope)
            records.put_budget(budget)
            window = BudgetWindow(budget, records.load())
            if not recovering:
                window.settle_unheld(set(), now)  # no lease from before is held here
        table = LeaseTable(key.scope, key.permits, key.ttl_s, now=self._started if recovering else now,
                           recovering=recovering, held_open=bool(self._awaiting), budget=window)
        entry = ScopeEntry(table, runs_known=not rebuilt, records=records)
        entry.wake([])  # writes out what the load settled
        self._scopes[key.scope] = entry
        self._dropped.pop(key.scope, None)
        self._ttls[key.ttl_s] += 1
        if recovering or rebuilt:
            logger.warning("semaphore %r: table rebuilt after a restart of service %s%s", key.scope, self._name,
                           " (recovering, no new grants until the window ends)" if recovering else "",
                           extra=_LOG_EXTRA)
        return entry

    def _drop_if_done(self, entry: ScopeEntry) -> None:
        if entry.droppable and self._scopes.get(entry.scope) is entry:
            self._drop(entry.scope, "retired and no lease held")

    def _drop(self, scope: str, why: str) -> None:
        """Forget the scope's table (caller holds the lock); its parked calls fail."""
        entry = self._scopes.pop(scope)
        entry.close()
        for run, actor_id in entry.runs.items():
            self._unlink(actor_id, scope, run)
        self._ttls[entry.table.ttl_s] -= 1
        if self._ttls[entry.table.ttl_s] <= 0:
            del self._ttls[entry.table.ttl_s]
        self._dropped[scope] = None
        self._dropped.move_to_end(scope)
        while len(self._dropped) > MAX_DROPPED:
            self._dropped.popitem(last=False)
        logger.info("semaphore %r: table dropped (%s)", scope, why, extra=_LOG_EXTRA)

    def _unlink(self, actor_id: str, scope: str, run: str) -> None:
        known = self._run_actors.get(actor_id)
        if known is None:
            return
        known[1].discard((scope, run))
        if not known[1]:
            del self._run_actors[actor_id]

    def _pacing(self) -> tuple[float, float]:
        """(sweep interval, seconds between run checks), from the shortest TTL served."""
        with self._lock:
            shortest = min(self._ttls, default=10.0)
        return min(0.25, shortest / 10), max(1.0, shortest / 2)

    def _sweep_forever(self) -> None:
        last_run_check = time.monotonic()
        pings: dict[concurrent.futures.Future[Any], tuple[Any, str]] = {}
        while True:
            interval, run_check_every = self._pacing()
            self._pause(interval)
            try:
                self._sweep_once()
                self._collect_probes(interval)
                self._await_owners()
                # Paced by the scopes served now: a check scheduled while only a long-TTL scope
                # was served must not hold back those of shorter TTLs that came since.
                if time.monotonic() - last_run_check >= run_check_every:
                    last_run_check = time.monotonic()
                    pings = self._check_runs(pings)
            except Exception:  # one bad round must not end the only sweep of many scopes
                logger.exception("semaphore service %s: sweep failed; going on", self._name, extra=_LOG_EXTRA)

    def _sweep_once(self) -> None:
        due: dict[str, list[tuple[str, str]]] = {}
        with self._lock:
            now = time.monotonic()
            for entry in list(self._scopes.values()):
                table = entry.table
                if table.held or table.waiting or table.state == "recovering":
                    entry.wake(table.tick(now))
                    for holder, lease_ids in table.due_probes(now).items():
                        due.setdefault(holder, []).extend((entry.scope, lease_id) for lease_id in lease_ids)
                self._drop_if_done(entry)
            for holder, items in due.items():
                owner = self._owners.get(holder)
                if owner is None:  # no way to ask: the clock decides, as for plain leases
                    self._answer(items, [False] * len(items))
                    continue
                ref = owner.holds_leases.remote([lease_id for _, lease_id in items])
                self._probes[ref.future()] = (ref, holder, items, now)

    def _pause(self, interval: float) -> None:
        """Until the next sweep: one interval (shorter when a budget's window makes room for a
        waiting grant sooner), cut short by a probe's answer (while any is out) or by a
        ``suspect`` report or a budget's waiting grant (while none is)."""
        with self._lock:
            probes = list(self._probes)
            now = time.monotonic()
            wakes = [w for e in self._scopes.values() if (w := e.table.budget_wake_at(now)) is not None]
        if wakes:
            interval = max(0.0, min(interval, min(wakes) - now))
        if probes:
            concurrent.futures.wait(probes, timeout=interval, return_when=concurrent.futures.FIRST_COMPLETED)
        else:
            self._kick.wait(interval)
        self._kick.clear()

    def _collect_probes(self, interval: float) -> None:
        with self._lock:
            done = [(p, self._probes.pop(p)) for p in list(self._probes) if p.done()]
        for probe, (_, holder, items, sent) in done:
            answers: list[bool | None]
            try:
                answers = list(probe.result())
            except ActorUnavailableError:
                answers = [None] * len(items)  # restarting or unreachable: ask again
                if time.monotonic() - sent >= interval:
                    # It took Ray a while to say so (a probe sent to the process that had just
                    # died): ask the restarted one at once, not an interval later.
                    self._kick.set()
            except RayActorError:
                answers = [False] * len(items)  # Ray's verdict: the holder died
            with self._lock:
                self._answer(items, answers)
                if answers and all(a is False for a in answers):
                    self._forget_owner(holder)

    def _answer(self, items: list[tuple[str, str]], answers: list[bool | None]) -> None:
        """Apply a probe's answers to the leases it asked about (caller holds the lock)."""
        now = time.monotonic()
        for (scope, lease_id), alive in zip(items, answers):
            entry = self._scopes.get(scope)
            if entry is None:
                continue  # dropped meanwhile: nothing of it counts any more
            entry.wake(entry.table.probe_answered(lease_id, alive, now))
            self._drop_if_done(entry)

    def _check_runs(
        self, pings: dict[concurrent.futures.Future[Any], tuple[Any, str]]
    ) -> dict[concurrent.futures.Future[Any], tuple[Any, str]]:
        """Ping each distinct actor of the attached runs once; the runs of an actor that died
        are detached (and a scope left without runs retires)."""
        for ping in [p for p in pings if p.done()]:
            _, actor_id = pings.pop(ping)
            try:
                ping.result()
            except ActorUnavailableError:
                continue
            except RayActorError:
                self._actor_died(actor_id)
        with self._lock:
            self._prune_owners()
            asked = {actor_id for _, actor_id in pings.values()}
            for actor_id, (handle, _) in self._run_actors.items():
                if actor_id not in asked:
                    ref = handle.__ray_ready__.remote()
                    pings[ref.future()] = (ref, actor_id)
        return pings

    def _prune_owners(self) -> None:
        """Forget the owners of holders that hold and await nothing in any scope (caller holds
        the lock): replicas come and go, the service stays. The next request or renewal of
        a holder names its owner again."""
        if not self._owners:
            return
        active: set[str] = set()
        for entry in self._scopes.values():
            if entry.table.held or entry.table.waiting:
                active |= entry.table.holders()
        for holder in [h for h in self._owners if h not in active and h not in self._awaiting]:
            self._forget_owner(holder)

    def _know_owner(self, holder: str, owner: Any) -> None:
        """Note the actor of ``holder``'s guarded leases (caller holds the lock); a new one is
        recorded before any lease of it is granted, so a restart knows whom to ask."""
        if holder not in self._owners:
            self._records.put(holder, owner)
        self._owners[holder] = owner

    def _forget_owner(self, holder: str) -> None:
        """``holder`` holds nothing here any more, or died (caller holds the lock)."""
        if self._owners.pop(holder, None) is not None:
            self._records.delete(holder)

    def _await_owners(self) -> None:
        """After a restart: ask each owner recorded before it to renew its leases, once at a
        time (a paused one answers when it resumes); once every one answered or died, the
        tables end their recovery with their windows."""
        if not self._awaiting and not self._renewing:
            return
        asked = {holder for _, holder in self._renewing.values()}
        for holder, owner in list(self._awaiting.items()):
            if holder in asked:
                continue
            try:
                ref = owner.renew_leases.remote()
            except AttributeError:  # an owner written to the older contract (holds_leases only)
                logger.warning("semaphore service %s: owner of %s has no renew_leases method; its leases count "
                               "only if it renews within the recovery window", self._name, holder,
                               extra=_LOG_EXTRA)
                with self._lock:
                    self._awaiting.pop(holder, None)
                    self._owners.setdefault(holder, owner)
                continue
            self._renewing[ref.future()] = (ref, holder)
        for future in [f for f in self._renewing if f.done()]:
            _, holder = self._renewing.pop(future)
            try:
                answered = bool(future.result())  # False: a service it holds leases of was unreachable
            except ActorUnavailableError:
                answered = False  # restarting or unreachable: ask again
            except RayActorError:
                with self._lock:
                    self._awaiting.pop(holder, None)
                    self._records.delete(holder)
                continue
            if answered:
                with self._lock:
                    owner = self._awaiting.pop(holder, None)
                    if owner is not None:
                        self._owners.setdefault(holder, owner)  # its record goes once it holds nothing
        with self._lock:
            if self._awaiting:
                return
            now = time.monotonic()
            for entry in self._scopes.values():
                entry.wake(entry.table.end_hold(now))
        logger.info("semaphore service %s: every owner from before the restart answered", self._name,
                    extra=_LOG_EXTRA)

    def _actor_died(self, actor_id: str) -> None:
        with self._lock:
            known = self._run_actors.pop(actor_id, None)
            if known is None:
                return
            now = time.monotonic()
            for scope, run in sorted(known[1]):
                entry = self._scopes.get(scope)
                if entry is None or entry.runs.get(run) != actor_id:
                    continue
                logger.info("semaphore %r: run %s is gone", scope, run, extra=_LOG_EXTRA)
                entry.detach(run, now, "every run that used it is gone")
                self._drop_if_done(entry)
