"""Wire models between the ``Orchestrator`` facade and its actor."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from cluster.storage import open_store

__all__ = ["Durability", "RunSpec", "OrchestratorStatistics", "DURABILITY_MODES"]

Durability = Literal["sync", "batch", "exit"]
DURABILITY_MODES: tuple[str, ...] = ("sync", "batch", "exit")


class RunSpec(BaseModel):
    """Everything the orchestrator actor is started with (and restarted with, by Ray)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    """The run's identity: the store key, and the actor name when ``named`` is set."""
    named: bool
    token: str = Field(repr=False)
    """The owner's capability: every write must present it. Never logged or stored in records."""
    initial: BaseModel
    store: Any = None
    """A path (str) or a store object, or None for memory only."""
    durability: Durability = "sync"
    max_parallel: int = 4
    caller: Any = None
    semaphore_scope: str
    checkpoint_every: int = 1_000
    logger_name: str = "soloist.orchestrator"

    @property
    def display_name(self) -> str:
        return self.name

    @property
    def store_path(self) -> str | None:
        if self.store is None:
            return None
        return self.store if isinstance(self.store, str) else getattr(self.store, "path", None)

    def open_store(self) -> Any:
        if self.store is None:
            return None
        return open_store(self.store, durability=self.durability)


class OrchestratorStatistics(BaseModel):
    """A point-in-time report of one orchestrator (feeds metrics and ``soloist status``)."""

    model_config = ConfigDict(frozen=True)

    name: str
    version: int
    state_type: str
    durability: Durability
    store: str | None
    applies: int
    apply_errors: int
    conflicts: int
    duplicate_requests: int
    refused_writes: int
    max_parallel: int
    restarted: bool
