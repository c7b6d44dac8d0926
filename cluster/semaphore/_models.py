"""The semaphore's public models (its leases and reports) and the checks of its arguments."""

from __future__ import annotations

import math

from pydantic import BaseModel

from cluster.semaphore._budget import BudgetStatistics
from cluster.semaphore._lease_table import SemaphoreState

__all__ = [
    "HARD_MAX_PERMITS", "Lease", "SemaphoreStatistics", "ServiceStatistics", "check_config", "check_acquire",
]

HARD_MAX_PERMITS = 4
"""No scope ever has more than four permits (the orchestrator's parallel-handoff cap)."""

_MIN_TTL_S = 0.5


class Lease(BaseModel, frozen=True):
    """One granted permit. ``lease_id`` is unique; pass the lease back to ``release``.

    ``generation`` is the fencing token the semaphore gave this grant (0 until granted);
    ``guarded`` leases are held by an actor and freed on Ray's verdict, not the clock.
    """

    lease_id: str
    scope: str
    holder: str
    limit: int
    generation: int = 0
    guarded: bool = False


class SemaphoreStatistics(BaseModel, frozen=True):
    """A point-in-time report of one scope's semaphore. Counters restart with its table."""

    scope: str
    permits: int
    held: int
    waiting: int
    granted_total: int
    released_total: int
    expired_total: int
    max_held: int
    state: SemaphoreState
    ttl_s: float
    generation: int = 0
    suspects: int = 0
    runs: int = 0
    retired: bool = False
    service: str = ""
    budget: BudgetStatistics | None = None
    """The scope's budget window (None: the scope has no budget)."""


class ServiceStatistics(BaseModel, frozen=True):
    """A point-in-time report of one semaphore service actor (all the scopes it holds)."""

    name: str
    scopes: int
    retired: int
    runs: int
    run_actors: int
    held: int
    waiting: int
    owners: int
    probes: int
    restarted: bool


# --------------------------------------------------------------------------- validation


def _check_int(name: str, value: object, low: int, high: int) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return f"{name} must be an int in {low}..{high}, got {value!r}"
    return None


def check_config(scope: object, permits: object, ttl_s: object) -> None:
    """Raise one ``ValueError`` listing every bad constructor argument."""
    problems: list[str] = []
    if not isinstance(scope, str) or not scope.strip():
        problems.append(f"scope must be a non-empty string, got {scope!r}")
    if (problem := _check_int("permits", permits, 1, HARD_MAX_PERMITS)) is not None:
        problems.append(problem)
    if (
        isinstance(ttl_s, bool)
        or not isinstance(ttl_s, (int, float))
        or not math.isfinite(ttl_s)
        or ttl_s < _MIN_TTL_S
    ):
        problems.append(f"ttl_s must be a finite number >= {_MIN_TTL_S}, got {ttl_s!r}")
    if problems:
        raise ValueError("invalid ClusterSemaphore arguments: " + "; ".join(problems))


def check_acquire(limit: object, timeout: object, holder: object) -> None:
    """Raise one ``ValueError`` listing every bad ``acquire`` argument."""
    problems: list[str] = []
    if (problem := _check_int("limit", limit, 1, HARD_MAX_PERMITS)) is not None:
        problems.append(problem)
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout < 0
    ):
        problems.append(f"timeout must be None or a finite number >= 0, got {timeout!r}")
    if holder is not None and (not isinstance(holder, str) or not holder):
        problems.append(f"holder must be None or a non-empty string, got {holder!r}")
    if problems:
        raise ValueError("invalid acquire arguments: " + "; ".join(problems))
