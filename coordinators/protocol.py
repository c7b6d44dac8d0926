"""`Coordinator`: the protocol every state-passed coordinator satisfies.

A coordinator is a pure decision step: it reads a `ContextSnapshot`, returns a
`CoordinatorResult`, holds no orchestrator reference and mutates nothing. The runtime
applies the result's transitions through the orchestrator, the single writer.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from coordinators.result import CoordinatorResult
from coordinators.snapshot import ContextSnapshot

__all__ = ["Coordinator"]


@runtime_checkable
class Coordinator(Protocol):
    """Anything with a `name` and an async `process(snapshot, message)`.

    `isinstance(obj, Coordinator)` checks only that both attributes exist (a
    `runtime_checkable` protocol cannot check signatures or that `process` is async).
    """

    name: str

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        """Decide what should change, given the snapshot and the incoming message."""
        ...
