"""The actor that hosts one pure coordinator: ``create_coordinator_actor``.

Owns the Ray side of a coordinator: a stateless actor that receives a snapshot and a
message and returns the coordinator's ``CoordinatorResult``. The run loop starts these;
the agent registry re-creates one from its stored record after a restart.

Starting one costs a process (about a second of a core on a small machine), so a driver
that knows its coordinators before its run begins may start their actors ahead, while the
orchestrator and the run's first writes go on: ``coordinators_started_ahead``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import ray

from actors._pickling import pickled
from actors.agents.managed import AgentConfig
from coordinators import ContextSnapshot, Coordinator, CoordinatorResult

__all__ = ["CoordinatorActor", "create_coordinator_actor", "coordinator_config", "coordinators_started_ahead"]


class CoordinatorActor:
    """Hosts one pure coordinator; receives a snapshot and a message, returns its result."""

    def __init__(self, coordinator: Coordinator) -> None:
        self._coordinator = coordinator

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        result = await self._coordinator.process(snapshot, message)
        if not isinstance(result, CoordinatorResult):
            raise TypeError(f"coordinator {self._coordinator.name!r} returned {type(result).__name__}, not a CoordinatorResult")
        return result


_RemoteCoordinator = ray.remote(CoordinatorActor)


@dataclass
class _StartedAhead:
    """An actor started for one coordinator object before its run asked for it."""

    coordinator: Coordinator  # the very object: a copy (a restored run's) starts its own actor
    handle: Any
    taken: bool = False  # handed to a run: from then on the run owns it (and kills it)


#: The actors started ahead in the current context (an ``async with``/``with`` block of the
#: driver, so its run's task sees them and no other run does), by ``id`` of their coordinator.
_AHEAD: contextvars.ContextVar[dict[int, _StartedAhead] | None] = contextvars.ContextVar(
    "soloist_coordinators_started_ahead", default=None)


def _start(coordinator: Coordinator) -> Any:
    return _RemoteCoordinator.options(num_cpus=0, scheduling_strategy="SPREAD").remote(coordinator)


def create_coordinator_actor(coordinator: Coordinator) -> Any:
    """A stateless actor hosting ``coordinator`` (also used to re-create one from its record).

    Inside ``coordinators_started_ahead`` it is the actor already started for this very
    object, the first time it is asked for; otherwise a new one."""
    ahead = _AHEAD.get()
    started = ahead.get(id(coordinator)) if ahead is not None else None
    if started is not None and started.coordinator is coordinator and not started.taken:
        started.taken = True
        return started.handle
    return _start(coordinator)


@contextlib.contextmanager
def coordinators_started_ahead(coordinators: Iterable[Coordinator]) -> Iterator[list[Any]]:
    """Start an actor for each of ``coordinators`` now (the block gets their handles, in
    order); inside the block, the run that asks for one of these very objects
    (``create_coordinator_actor``) gets its actor, already starting or started, and owns it
    from then on. The actors no run took are killed when the block ends. Nothing else
    changes: the run records, drives and kills them as its own.

    It takes the start of the actor processes off the run's path: they start in parallel
    with the orchestrator's start and the run's first writes."""
    ahead = {id(c): _StartedAhead(c, _start(c)) for c in coordinators}
    token = _AHEAD.set(ahead)
    try:
        yield [started.handle for started in ahead.values()]
    finally:
        _AHEAD.reset(token)
        for started in ahead.values():
            if not started.taken:
                ray.kill(started.handle)


def coordinator_config(coordinator: Coordinator) -> AgentConfig:
    """The managed-agent config that lets a run re-create ``coordinator``'s actor after a restart."""
    return AgentConfig(extra={"coordinator": pickled(coordinator)})
