"""One scope inside a semaphore service actor: its lease table, the calls parked on it, the
runs that use it.

Not thread-safe: the service calls every method with its lock held. Parked calls are woken
with ``call_soon_threadsafe`` on their own event loop (Ray runs each concurrency group of an
async actor on a loop thread of its own).

Lifecycle of a scope (``ScopeStatus``):
  - ``serving``: runs use it (or it was opened without runs, by a facade).
  - ``retired``: the last attached run detached or died: it grants nothing more and parked
    requests are withdrawn; its table is dropped as soon as no lease is held (the work
    those leases admit may still run, so its permits still count). A run that joins a
    retired scope serves it again: the same table, so the cap never splits.
  - ``dropped``: no table any more; calls naming it get ``ScopeGone``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal, NamedTuple

from cluster.semaphore._budget import Budget
from cluster.semaphore._budget_records import BudgetRecords
from cluster.semaphore._lease_table import LeaseTable, Outcome
from coordinators.exceptions import SoloistError

__all__ = ["ScopeKey", "ScopeConfig", "ScopeGone", "ScopeEntry", "ScopeStatus", "Detached"]

logger = logging.getLogger(__name__)
_LOG_EXTRA = {"component": "cluster-semaphore"}

ScopeStatus = Literal["serving", "retired", "dropped"]

Detached = Literal["in-use", "retiring", "retired"]
"""What ``detach_run`` did: others still use the scope; the last run left but leases are
still held (its table is dropped once they are released); the last run left, none held
(its table is dropped now)."""


class ScopeKey(NamedTuple):
    """What a facade sends with each call: the scope and its configuration (its cap, its
    leases' TTL and its budget), so a service that restarted (and lost its tables) can
    rebuild the table, and whether the facade may create the scope (its constructor's,
    until the service first answered it)."""

    scope: str
    permits: int
    ttl_s: float
    create: bool = False
    budget: Budget | None = None


ScopeConfig = tuple[int, float, Budget | None]
"""A scope's configuration as the service answers it: ``(permits, ttl_s, budget)``."""


class ScopeGone(SoloistError, RuntimeError):
    """Raised (inside the service) when a call names a scope the service holds no table for:
    destroyed, retired with its last run, or never opened."""

    def __init__(self, scope: str) -> None:
        super().__init__(scope)
        self.scope = scope

    def __str__(self) -> str:
        return f"the semaphore service holds no table for scope {self.scope!r}"

    def __reduce__(self) -> tuple[type[ScopeGone], tuple[str]]:
        return (ScopeGone, (self.scope,))


def _settle(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _fail(fut: asyncio.Future[Any], error: BaseException) -> None:
    if not fut.done():
        fut.set_exception(error)


_Parked = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class ScopeEntry:
    """One scope's table and everything parked on it (the service's lock guards it all)."""

    def __init__(self, table: LeaseTable, *, runs_known: bool, records: BudgetRecords | None = None) -> None:
        self.table = table
        # Where the budget's charges are kept outside the service (a budgeted table only).
        self.records = records
        # lease_id -> the acquire calls parked on it (one per call, usually one).
        self.listeners: dict[str, list[_Parked]] = {}
        # Contention watches parked until "anyone waiting" changes from what they saw.
        self.watchers: list[tuple[bool, asyncio.AbstractEventLoop, asyncio.Future[bool]]] = []
        # Runs using the scope: run name -> the id of its actor (pinged by the service).
        self.runs: dict[str, str] = {}
        # False when the table was rebuilt after a restart of the service: runs from before
        # are unknown, so the scope never retires on its own.
        self.runs_known = runs_known
        self.retired = False

    @property
    def scope(self) -> str:
        return self.table.scope

    @property
    def droppable(self) -> bool:
        """Retired and no lease held: nothing of it counts any more."""
        return self.retired and self.table.held == 0

    def status(self) -> ScopeStatus:
        return "retired" if self.retired else "serving"

    def park(self, lease_id: str, loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Outcome]) -> None:
        self.listeners.setdefault(lease_id, []).append((loop, fut))

    def forget(self, lease_id: str, fut: asyncio.Future[Any]) -> None:
        remaining = [(lp, f) for lp, f in self.listeners.get(lease_id, []) if f is not fut]
        if remaining:
            self.listeners[lease_id] = remaining
        else:
            self.listeners.pop(lease_id, None)

    def config(self) -> ScopeConfig:
        table = self.table
        return table.permits, table.ttl_s, None if table.budget is None else table.budget.budget

    def wake(self, decided: list[tuple[str, Outcome]]) -> None:
        """Resolve the parked calls of decided requests and the contention watches; first
        write the budget's new charges out, so a grant is recorded before anyone hears of it."""
        if self.records is not None and self.table.budget is not None:
            self.records.write(*self.table.budget.drain_changes())
        for lease_id, outcome in decided:
            for loop, fut in self.listeners.pop(lease_id, []):
                self._post(loop, _settle, fut, outcome)
        contended = self.table.waiting > 0
        for seen, loop, fut in self.watchers:
            if seen != contended:
                self._post(loop, _settle, fut, contended)

    def attach(self, run: str, actor_id: str) -> str | None:
        """Record ``run``; serve again if retired. Returns the actor id it had before, if any."""
        if self.retired:
            self.retired = False
            logger.info("semaphore %r: run %s joined it again; serving", self.scope, run, extra=_LOG_EXTRA)
        previous = self.runs.get(run)
        self.runs[run] = actor_id
        return previous

    def detach(self, run: str, now: float, why: str) -> Detached:
        """``run`` no longer uses the scope; retire when it was the last one."""
        self.runs.pop(run, None)
        if self.runs or not self.runs_known:
            return "in-use"
        self.retire(why, now)
        return "retired" if self.table.held == 0 else "retiring"

    def retire(self, why: str, now: float) -> None:
        """Grant nothing more; parked requests are withdrawn."""
        if self.retired:
            return
        self.retired = True
        logger.info("semaphore %r retired: %s", self.scope, why, extra=_LOG_EXTRA)
        decided: list[tuple[str, Outcome]] = []
        for lease_id in list(self.listeners):
            _, more = self.table.release(lease_id, now)
            decided += more
        self.wake(decided)

    def close(self) -> None:
        """The table is dropped: every call still parked on it fails with ``ScopeGone``."""
        parked = [p for ps in self.listeners.values() for p in ps] + [(lp, f) for _, lp, f in self.watchers]
        self.listeners.clear()
        self.watchers.clear()
        for loop, fut in parked:
            self._post(loop, _fail, fut, ScopeGone(self.scope))

    def statistics(self) -> dict[str, object]:
        return {**self.table.statistics(), "runs": len(self.runs), "retired": self.retired}

    def _post(self, loop: asyncio.AbstractEventLoop, how: Any, fut: asyncio.Future[Any], value: Any) -> None:
        try:
            loop.call_soon_threadsafe(how, fut, value)
        except RuntimeError:
            # The loop is closed: the actor is shutting down and the call is gone.
            logger.warning(
                "semaphore %r: cannot wake a parked call (%s): its event loop is closed",
                self.scope, value, exc_info=True, extra=_LOG_EXTRA,
            )
