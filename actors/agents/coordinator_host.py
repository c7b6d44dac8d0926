"""The actor that hosts one pure coordinator: ``create_coordinator_actor``.

Owns the Ray side of a coordinator: a stateless actor that receives a snapshot and a
message and returns the coordinator's ``CoordinatorResult``. The run loop starts these;
the agent registry re-creates one from its stored record after a restart.
"""

from __future__ import annotations

from typing import Any

import ray

from actors._pickling import pickled
from actors.agents.managed import AgentConfig
from coordinators import ContextSnapshot, Coordinator, CoordinatorResult

__all__ = ["CoordinatorActor", "create_coordinator_actor", "coordinator_config"]


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


def create_coordinator_actor(coordinator: Coordinator) -> Any:
    """A stateless actor hosting ``coordinator`` (also used to re-create one from its record)."""
    return _RemoteCoordinator.options(num_cpus=0, scheduling_strategy="SPREAD").remote(coordinator)


def coordinator_config(coordinator: Coordinator) -> AgentConfig:
    """The managed-agent config that lets a run re-create ``coordinator``'s actor after a restart."""
    return AgentConfig(extra={"coordinator": pickled(coordinator)})
