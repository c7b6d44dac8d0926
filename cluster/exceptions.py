"""Errors raised by the ``cluster`` package, one class per meaning.

Setup errors subclass ``ValueError``; runtime errors subclass ``RuntimeError``.
Each docstring starts with when the error is raised, so callers can decide what to catch.
"""

from __future__ import annotations

from coordinators.exceptions import SoloistError

__all__ = [
    "LocalClusterError",
    "ReplicaBudgetFull",
    "SemaphoreConfigConflict",
    "SemaphoreTimeout",
    "SemaphoreUnavailable",
]


class SemaphoreTimeout(SoloistError, RuntimeError):
    """Raised when ``ClusterSemaphore.acquire`` is not granted a permit within its timeout.

    No permit is held when this is raised: the parked request has been withdrawn.
    """

    def __init__(self, scope: str, limit: int, timeout: float) -> None:
        self.scope = scope
        self.limit = limit
        self.timeout = timeout
        super().__init__(
            f"semaphore {scope!r}: no permit granted within timeout={timeout:g}s "
            f"(limit={limit})"
        )

    def __reduce__(self) -> tuple[type[SemaphoreTimeout], tuple[str, int, float]]:
        """Pickle by the constructor arguments (the error crosses process boundaries)."""
        return (type(self), (self.scope, self.limit, self.timeout))


class SemaphoreUnavailable(SoloistError, RuntimeError):
    """Raised when a semaphore scope cannot be reached: Ray is not initialised, the scope was
    destroyed or retired with its last run (its service holds no table for it), its service
    actor died permanently, or it stayed unreachable longer than the retry budget.
    """


class SemaphoreConfigConflict(SoloistError, ValueError):
    """Raised when a ``ClusterSemaphore`` is opened on a scope whose live table was created
    with a different ``permits`` or ``ttl_s``; one scope has exactly one configuration.
    """


class LocalClusterError(SoloistError, RuntimeError):
    """Raised by ``soloist up``/``down`` when the local cluster cannot be started, read or stopped.

    The message names the record file or the head's pid, and quotes the end of Ray's output
    when the head failed to start; nothing is left running after a failed start.
    """


class ReplicaBudgetFull(SoloistError, RuntimeError):
    """Raised to the calls waiting for a pool's first replica when the cluster-wide replica
    budget gave it no place within the wait allowed (``SOLOIST_REPLICA_BUDGET_WAIT_S``).

    Nothing ran: the calls never reached a replica. The pool asks again for the next call.
    """

    def __init__(self, pool: str, skill: str, *, budget: str, limit: int | None, used: int | None,
                 waiting: int | None, waited_s: float) -> None:
        self.pool, self.skill, self.budget = pool, skill, budget
        self.limit, self.used, self.waiting, self.waited_s = limit, used, waiting, waited_s
        fullness = ("its usage could not be read" if limit is None else
                    f"{used} of {limit} places in use, {waiting} request(s) waiting")
        super().__init__(
            f"skill {skill!r}: no replica of pool {pool!r} could start within {waited_s:g}s: the cluster's replica "
            f"budget ({budget!r}) is full ({fullness}). Raise it with cluster.replicas.set_replica_budget(n) "
            f"(or SOLOIST_MAX_REPLICAS before the cluster starts), lower the max_replicas or min_replicas of other "
            f"pools, or close the runs whose pools hold the places; SOLOIST_REPLICA_BUDGET_WAIT_S sets how long a "
            f"call waits for a place."
        )
