"""The cluster's room for subagent replicas: which nodes can hold one, how many fit, and the
cluster-wide replica budget that every pool draws from.

The budget is one named actor (``soloist:replica-budget`` in the ``soloist`` namespace). It
keeps no count of its own that a crash could lose: the replicas in use are the live named
replica actors (``soloist:sub:...``) in Ray's own table, plus the ones it granted a moment
ago that Ray does not list yet. A replica that retires or dies leaves Ray's table and so
frees its place, whoever forgot to say so. When the budget is full, requests wait and are
granted oldest first, so the pools that have waited longest grow first; a later request
never overtakes an older one.

The limit is ``SOLOIST_MAX_REPLICAS`` (default 256) in the process that first creates the
budget actor, or ``set_replica_budget(n)`` at any time. A pool with no replica up waits for a
place at most ``SOLOIST_REPLICA_BUDGET_WAIT_S`` seconds (default 120, ``budget_wait_s``);
then the calls waiting for it fail with ``ReplicaBudgetFull`` (``budget_full``), which says
how full the budget is and what to do.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import os
import time
from typing import Any

import ray
from pydantic import BaseModel, ConfigDict

from cluster.connect import SOLOIST_NAMESPACE, wait_ref
from cluster.exceptions import ReplicaBudgetFull
from cluster.process import process_registry

__all__ = [
    "REPLICA_PREFIX", "DEFAULT_MAX_REPLICAS", "DEFAULT_BUDGET_WAIT_S", "ReplicaBudget", "acquire_replica_place",
    "set_replica_budget", "budget_wait_s", "budget_full",
    "replica_budget", "live_replica_names", "replica_pool_of", "replicas_per_pool", "nodes_for", "capacity_for", "missing_resources",
]

_log = logging.getLogger(__name__)

#: Every subagent replica's Ray name starts so: ``soloist:sub:{caller key}:{skill}:{slot}``.
REPLICA_PREFIX = "soloist:sub:"
#: The budget when ``SOLOIST_MAX_REPLICAS`` is not set.
DEFAULT_MAX_REPLICAS = 256
#: How long a pool with no replica up waits for a place when ``SOLOIST_REPLICA_BUDGET_WAIT_S``
#: is not set: its calls fail then (``ReplicaBudgetFull``) instead of waiting forever.
DEFAULT_BUDGET_WAIT_S = 120.0
_BUDGET_NAME = "soloist:replica-budget"
#: How long a granted place counts before Ray lists its replica (creation under way).
_GRANT_HOLD_S = 30.0
#: How often waiting requests look again at Ray's table (retirements free places silently).
_POLL_S = 0.1


def replica_pool_of(name: str) -> tuple[str, str] | None:
    """``(pool key, skill)`` of replica ``soloist:sub:{key}:{skill}:{slot}`` (a skill may hold
    ``:``); None for a name that is not a replica's."""
    if not name.startswith(REPLICA_PREFIX):
        return None
    key, _, skill_slot = name[len(REPLICA_PREFIX):].partition(":")
    skill, _, slot = skill_slot.rpartition(":")
    return (key, skill) if key and skill and slot.isdigit() else None


def replicas_per_pool() -> dict[tuple[str, str], int]:
    """How many replicas each pool has up now, by ``(pool key, skill)``, from Ray's table."""
    counts: dict[tuple[str, str], int] = {}
    for name in live_replica_names():
        pool = replica_pool_of(name)
        if pool is not None:
            counts[pool] = counts.get(pool, 0) + 1
    return counts


def live_replica_names() -> set[str]:
    """The subagent replicas alive (or restarting) now, by name, from Ray's table of named actors."""
    return {entry["name"] for entry in ray.util.list_named_actors(all_namespaces=True)
            if entry.get("namespace") == SOLOIST_NAMESPACE and entry["name"].startswith(REPLICA_PREFIX)}


class ReplicaBudget(BaseModel):
    """The budget now: its limit, the places in use and the requests waiting for one."""

    model_config = ConfigDict(frozen=True)

    limit: int
    used: int
    waiting: int


class _Waiter:
    __slots__ = ("since", "seq", "replica", "future")

    def __init__(self, since: float, seq: int, replica: str, future: asyncio.Future[bool]) -> None:
        self.since, self.seq, self.replica, self.future = since, seq, replica, future

    def __lt__(self, other: "_Waiter") -> bool:
        return (self.since, self.seq) < (other.since, other.seq)


class _BudgetActor:
    """Grants places for replicas, oldest request first (see the module docstring)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._granted: dict[str, float] = {}  # replica name -> until when it counts unlisted
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()
        self._poller: asyncio.Task[None] | None = None

    def _grant(self) -> None:
        live = live_replica_names()
        now = time.monotonic()
        self._granted = {name: until for name, until in self._granted.items() if name not in live and until > now}
        used = len(live) + len(self._granted)
        while self._waiting:
            waiter = self._waiting[0]
            if waiter.future.done():  # its request gave up waiting
                heapq.heappop(self._waiting)
                continue
            counted = waiter.replica in live or waiter.replica in self._granted
            if not counted and used >= self._limit:
                break  # oldest first: nobody overtakes the head of the queue
            heapq.heappop(self._waiting)
            if not counted:
                self._granted[waiter.replica] = now + _GRANT_HOLD_S
                used += 1
            waiter.future.set_result(True)

    async def _poll(self) -> None:
        # Also while a granted place is not yet listed: it leaves ``_granted`` only when a look
        # finds its replica listed, and one listed and gone again between two looks (created,
        # served, retired) would otherwise count, unlisted, for ``_GRANT_HOLD_S``.
        while self._waiting or self._granted:
            await asyncio.sleep(_POLL_S)
            self._grant()

    async def acquire(self, replica: str, since: float, wait_s: float) -> bool:
        """A place for ``replica`` (True), or False after ``wait_s`` without one; ``since`` is
        when its pool began to wait (its rank in the queue)."""
        waiter = _Waiter(since, next(self._seq), replica, asyncio.get_running_loop().create_future())
        heapq.heappush(self._waiting, waiter)
        self._grant()
        if (not waiter.future.done() or self._granted) and (self._poller is None or self._poller.done()):
            self._poller = asyncio.get_running_loop().create_task(self._poll())
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), wait_s)
        except TimeoutError:
            waiter.future.cancel()
            return False

    async def set_limit(self, limit: int) -> None:
        self._limit = limit
        self._grant()

    async def usage(self) -> ReplicaBudget:
        live = live_replica_names()
        now = time.monotonic()
        unlisted = sum(1 for name, until in self._granted.items() if name not in live and until > now)
        waiting = sum(1 for waiter in self._waiting if not waiter.future.done())
        return ReplicaBudget(limit=self._limit, used=len(live) + unlisted, waiting=waiting)


_RemoteBudget = ray.remote(_BudgetActor)


def _limit_from_env() -> int:
    raw = os.environ.get("SOLOIST_MAX_REPLICAS", "").strip()
    if not raw:
        return DEFAULT_MAX_REPLICAS
    try:
        limit = int(raw)
    except ValueError:
        raise ValueError(f"SOLOIST_MAX_REPLICAS must be an integer >= 1, got {raw!r}") from None
    if limit < 1:
        raise ValueError(f"SOLOIST_MAX_REPLICAS must be an integer >= 1, got {raw!r}")
    return limit


def _budget() -> Any:
    def create() -> Any:
        return _RemoteBudget.options(
            name=_BUDGET_NAME, namespace=SOLOIST_NAMESPACE, get_if_exists=True,
            lifetime="detached",  # shared by every driver; it holds nothing a restart would lose
            # Calls wait for a restart (its node was lost) instead of failing: asking for a
            # place again is harmless, places are counted from Ray's table.
            max_restarts=-1, max_task_retries=-1, num_cpus=0,
        ).remote(_limit_from_env())

    return process_registry().replica_budget.get_or_create("budget", create)


def acquire_replica_place(replica: str, since: float, wait_s: float = 2.0) -> bool:
    """Blocking: a place in the budget for replica ``replica`` (True), or False after
    ``wait_s``. Ask again with the same ``since`` to keep the request's rank."""
    return bool(wait_ref(_budget().acquire.remote(replica, since, wait_s), timeout=wait_s + 30.0))


def set_replica_budget(limit: int) -> None:
    """Set the most replicas all pools of the cluster may hold together (an int >= 1)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"set_replica_budget: limit must be an int >= 1, got {limit!r}")
    wait_ref(_budget().set_limit.remote(limit), timeout=30.0)


def replica_budget() -> ReplicaBudget:
    """The budget now, as its actor sees it."""
    return wait_ref(_budget().usage.remote(), timeout=30.0)


def budget_wait_s() -> float:
    """How long a pool with no replica up waits for a place in the budget before its waiting
    calls fail: ``SOLOIST_REPLICA_BUDGET_WAIT_S`` (seconds > 0), else ``DEFAULT_BUDGET_WAIT_S``."""
    raw = os.environ.get("SOLOIST_REPLICA_BUDGET_WAIT_S", "").strip()
    if not raw:
        return DEFAULT_BUDGET_WAIT_S
    try:
        wait = float(raw)
    except ValueError:
        wait = math.nan
    if not (math.isfinite(wait) and wait > 0):
        raise ValueError(f"SOLOIST_REPLICA_BUDGET_WAIT_S must be a number of seconds > 0, got {raw!r}")
    return wait


def budget_full(pool: str, skill: str, waited_s: float) -> ReplicaBudgetFull:
    """The error for the calls of ``pool`` (serving ``skill``) that waited ``waited_s`` for a
    place, with the budget's usage as its actor reports it now."""
    try:
        usage: ReplicaBudget | None = replica_budget()
    except Exception as exc:  # the error is still worth raising without the figures
        _log.warning("could not read the replica budget's usage: %s", exc)
        usage = None
    return ReplicaBudgetFull(pool, skill, budget=_BUDGET_NAME, limit=None if usage is None else usage.limit,
                             used=None if usage is None else usage.used,
                             waiting=None if usage is None else usage.waiting, waited_s=waited_s)


def _alive_nodes() -> list[dict[str, Any]]:
    return [node for node in ray.nodes() if node.get("Alive")]


def _fits(node: dict[str, Any], needs: dict[str, float]) -> int:
    """How many replicas needing ``needs`` the node's totals hold (a large number if no needs)."""
    totals = node.get("Resources", {})
    counts = [math.floor(totals.get(name, 0.0) / amount + 1e-9) for name, amount in needs.items()]
    return min(counts) if counts else 1 << 30


def nodes_for(needs: dict[str, float]) -> list[str]:
    """The alive nodes that can hold a replica needing ``needs``, in a stable order."""
    return sorted(node["NodeID"] for node in _alive_nodes() if _fits(node, needs) >= 1)


def capacity_for(needs: dict[str, float]) -> int | None:
    """How many replicas needing ``needs`` the alive nodes hold in all; None when they need nothing."""
    if not needs:
        return None
    return sum(_fits(node, needs) for node in _alive_nodes())


def missing_resources(needs: dict[str, float]) -> list[str]:
    """The resources of ``needs`` that no alive node has enough of for one replica."""
    nodes = _alive_nodes()
    return [name for name, amount in needs.items()
            if not any(node.get("Resources", {}).get(name, 0.0) >= amount for node in nodes)]
