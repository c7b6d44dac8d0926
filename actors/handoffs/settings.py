"""What a handoff needs to know about its run: one frozen ``HandoffSettings`` value, and the cap rules.

Owns the contract between the orchestrator and the handoff functions. The orchestrator
hands out a ``HandoffSettings`` (``HandoffTarget.handoff_settings()``); ``handoff`` and
``parallel_handoff`` read only that, so they never import the ``Orchestrator`` facade.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from cluster.semaphore import HARD_MAX_PERMITS

__all__ = ["HandoffSettings", "HandoffTarget", "DEFAULT_MAX_PARALLEL", "HARD_MAX_PARALLEL", "effective_max_parallel"]

#: The parallel-handoff cap when none is set (or a value <= 0 is set).
DEFAULT_MAX_PARALLEL = 4
#: The ceiling ``set_max_parallel`` cannot exceed; larger values are clamped with a warning.
#: Handoffs start LLM calls and tool invocations that are individually expensive, so
#: unbounded fan-out is not a safe default for a runtime that composes third-party APIs.
#: It is the semaphore's own ceiling (the same object): a run's cap is its scope's permits.
HARD_MAX_PARALLEL = HARD_MAX_PERMITS


def effective_max_parallel(requested: int) -> int:
    """The cap a run really uses for a requested one: ``<= 0`` -> the default; above the
    hard ceiling -> the ceiling. The one rule: the facade, ``HandoffSettings`` and the runs
    page all compute a cap with it."""
    if requested <= 0:
        return DEFAULT_MAX_PARALLEL
    return min(requested, HARD_MAX_PARALLEL)


@dataclass(frozen=True, slots=True)
class HandoffSettings:
    """One run's handoff parameters, read when a handoff starts.

    ``max_parallel`` is the effective cap (normalised and clamped to the hard ceiling);
    ``requested_max_parallel`` is what ``set_max_parallel`` asked for (a clamp is logged).
    """

    name: str
    """The run's name (metrics, logs, and the subagents' trace context)."""
    caller: Any
    """The run's ``ToolCaller``, or None (a handoff then raises ``NoToolCaller``)."""
    semaphore_scope: str
    """The cluster-wide semaphore scope whose permits cap this run's handoffs."""
    max_parallel: int
    requested_max_parallel: int
    logger: logging.LoggerAdapter[logging.Logger]
    tracer: Any
    """An OpenTelemetry tracer, or None."""


@runtime_checkable
class HandoffTarget(Protocol):
    """What ``handoff`` takes: something that hands out its ``HandoffSettings`` (an ``Orchestrator``)."""

    def handoff_settings(self) -> HandoffSettings:
        """The settings now, with the cap this process last read."""
        ...

    async def join_semaphore(self) -> None:
        """Make sure the run's semaphore scope is up and counts the run as a user (once)."""
        ...

    async def refresh_max_parallel(self) -> int:
        """Re-read the run's cap (another process may have changed it); returns the effective cap."""
        ...
