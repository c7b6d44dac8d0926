"""The actor that hosts a run's pure coordinators: ``create_coordinator_host``.

Owns the Ray side of coordinators: a stateless actor that receives a snapshot, a message and
the name of the coordinator whose turn it is, and returns that coordinator's
``CoordinatorResult``. A run starts one such actor for all its coordinators (their turns
come one at a time, so one process serves them all: a run used to start a process per
coordinator); the agent registry re-creates one for a single coordinator from its stored
record after a restart (``create_coordinator_actor``).

Starting one costs a process (about a second of a core on a small machine), so a driver
that knows its coordinators before its run begins may start their actor ahead, while the
orchestrator and the run's first writes go on: ``coordinators_started_ahead``. The actor's
class travels by value (``register_pickle_by_value`` below): its process imports ``coordinators`` and what
the coordinators themselves need, not the whole ``actors`` package.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import ray
import ray.cloudpickle

from actors._pickling import pickled
from actors.agents.managed import AgentConfig
from cluster.connect import ensure_connected
from coordinators import ContextSnapshot, Coordinator, CoordinatorResult

__all__ = ["CoordinatorActor", "create_coordinator_actor", "create_coordinator_host", "coordinator_config",
           "coordinators_started_ahead"]


class CoordinatorActor:
    """Hosts pure coordinators by name; receives a snapshot and a message, returns a result.

    ``process(snapshot, message, name)`` runs the coordinator named ``name``; without a name,
    the actor must host exactly one coordinator, which takes the turn."""

    def __init__(self, coordinators: Mapping[str, Coordinator]) -> None:
        self._coordinators = dict(coordinators)  # run config name -> coordinator; never changes

    async def process(self, snapshot: ContextSnapshot, message: str, name: str | None = None) -> CoordinatorResult:
        if name is None and len(self._coordinators) == 1:
            (coordinator,) = self._coordinators.values()
        elif name in self._coordinators:
            coordinator = self._coordinators[name]
        else:
            raise KeyError(f"this coordinator actor hosts {', '.join(sorted(self._coordinators))}; "
                           f"it was asked for {name!r}")
        result = await coordinator.process(snapshot, message)
        if not isinstance(result, CoordinatorResult):
            raise TypeError(f"coordinator {coordinator.name!r} returned {type(result).__name__}, not a CoordinatorResult")
        return result


#: Ray sends the actor's class by value: a process loading it by reference would import this
#: module, hence the whole ``actors`` package (about 0.6 s of a core), for a class that needs
#: only ``coordinators``. Nothing else of this module is ever pickled.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
_RemoteCoordinator = ray.remote(CoordinatorActor)


@dataclass
class _StartedAhead:
    """An actor started for a group of coordinator objects before their run asked for it."""

    coordinators: dict[str, Coordinator]  # the very objects: a copy (a restored run's) starts its own actor
    handle: Any
    taken: bool = False  # handed to a run: from then on the run owns it (and kills it)

    def hosts(self, coordinators: Mapping[str, Coordinator]) -> bool:
        return (not self.taken and self.coordinators.keys() == coordinators.keys()
                and all(coordinators[n] is c for n, c in self.coordinators.items()))


#: The actor started ahead in the current context (an ``async with``/``with`` block of the
#: driver, so its run's task sees it and no other run does).
_AHEAD: contextvars.ContextVar[_StartedAhead | None] = contextvars.ContextVar(
    "soloist_coordinators_started_ahead", default=None)


def _start(coordinators: Mapping[str, Coordinator]) -> Any:
    ensure_connected()  # soloist's embedded Ray when nothing is connected, as an Orchestrator starts it
    return _RemoteCoordinator.options(num_cpus=0, scheduling_strategy="SPREAD").remote(dict(coordinators))


def _table(coordinators: Iterable[Coordinator]) -> dict[str, Coordinator]:
    return {c.name: c for c in coordinators}


def create_coordinator_host(coordinators: Mapping[str, Coordinator]) -> Any:
    """One actor hosting all of ``coordinators`` (by their names in the run), for a run.

    Inside ``coordinators_started_ahead`` for these very objects it is the actor already
    started, the first time it is asked for; otherwise a new one."""
    ahead = _AHEAD.get()
    if ahead is not None and ahead.hosts(coordinators):
        ahead.taken = True
        return ahead.handle
    return _start(coordinators)


def create_coordinator_actor(coordinator: Coordinator) -> Any:
    """A stateless actor hosting ``coordinator`` alone (used to re-create one from its record)."""
    return create_coordinator_host(_table([coordinator]))


@contextlib.contextmanager
def coordinators_started_ahead(coordinators: Iterable[Coordinator]) -> Iterator[list[Any]]:
    """Start the one actor that will host ``coordinators`` now (the block gets its handle, once
    per coordinator, in order); inside the block, the run of these very objects (or
    ``create_coordinator_actor`` of the only one) gets that actor, already starting or
    started, and owns it from then on. An actor no run took is killed when the block ends.
    Nothing else changes: the run records, drives and kills it as its own.

    It takes the start of the actor's process off the run's path: it starts in parallel
    with the orchestrator's start and the run's first writes."""
    listed = list(coordinators)
    table = _table(listed)
    ahead = _StartedAhead(table, _start(table))
    token = _AHEAD.set(ahead)
    try:
        yield [ahead.handle for _ in listed]
    finally:
        _AHEAD.reset(token)
        if not ahead.taken:
            ray.kill(ahead.handle)


def coordinator_config(coordinator: Coordinator) -> AgentConfig:
    """The managed-agent config that lets a run re-create ``coordinator``'s actor after a restart."""
    return AgentConfig(extra={"coordinator": pickled(coordinator)})
