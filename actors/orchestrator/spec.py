"""Wire models between the ``Orchestrator`` facade and its actor."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from actors._pickling import pickled_once, shareable, unpickled_shared
from actors.callers.protocol import ToolCaller
from actors.handoffs.settings import DEFAULT_MAX_PARALLEL
from cluster.storage import DURABILITY_MODES, Durability, Store, open_store, redact

__all__ = ["RunSpec", "RunDescription", "OrchestratorStatistics", "DURABILITY_MODES", "DEFAULT_KEEP_VERSIONS"]

#: Versions kept readable by default (history, fork): bounded, so a long run's store is too.
DEFAULT_KEEP_VERSIONS = 10_000

class RunSpec(BaseModel):
    """Everything the orchestrator actor is started with (and restarted with, by Ray)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    """The run's identity: the store key, and the actor name when ``named`` is set."""
    named: bool
    token: str = Field(repr=False)
    """The owner's capability: every write must present it. Never logged or stored in records."""
    initial: BaseModel
    store: SkipValidation[str | Store | None] = None
    """A path (str) or a store object, or None for memory only."""
    durability: Durability = "sync"
    max_parallel: int = DEFAULT_MAX_PARALLEL
    caller: SkipValidation[ToolCaller | None] = None
    caller_pickled: str | None = Field(default=None, repr=False)
    """The caller as ``actors._pickling`` text, as a driver sends it to a run host (``caller``
    is then None until the host loads it, once for every run of one registry)."""
    semaphore_scope: str
    checkpoint_every: int = 1_000
    keep_versions: int | None = DEFAULT_KEEP_VERSIONS
    """Retention: at least this many latest versions stay readable (history, fork); None: no limit."""
    keep_days: float | None = None
    """Retention: versions younger than this many days stay readable; None: no limit."""
    unload_after_s: float | None = None
    """A hosted durable run idle this long leaves memory (None: its host's default)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Extra JSON-clean facts stored with a new run (e.g. which run it was forked from)."""
    logger_name: str = "soloist.orchestrator"

    @property
    def display_name(self) -> str:
        return self.name

    @property
    def store_path(self) -> str | None:
        """The store's file or URL, never with a password (it is reported and logged)."""
        if self.store is None:
            return None
        return redact(self.store) if isinstance(self.store, str) else getattr(self.store, "path", None)

    def described(self) -> RunDescription:
        """What a handle of this run needs (everything but the token)."""
        return RunDescription(name=self.name, max_parallel=self.max_parallel, semaphore_scope=self.semaphore_scope,
                              caller=self.caller, state_type=type(self.initial), checkpoint_every=self.checkpoint_every,
                              keep_versions=self.keep_versions, keep_days=self.keep_days)

    def for_host(self) -> RunSpec:
        """This spec as it travels to a run host: the caller as text, pickled once for every
        run started with the same registry (Ray would pickle it again for each)."""
        if self.caller is None or self.caller_pickled is not None or not shareable(self.caller):
            return self  # another caller travels as before: a copy of its own per run, by Ray's pickler
        return self.model_copy(update={"caller": None, "caller_pickled": pickled_once(self.caller)})

    def on_host(self) -> RunSpec:
        """This spec with its caller loaded (the inverse of ``for_host``): the host keeps the
        text too, to store it as is."""
        if self.caller is not None or self.caller_pickled is None:
            return self
        return self.model_copy(update={"caller": unpickled_shared(self.caller_pickled)})

    def open_store(self) -> Any:
        if self.store is None:
            return None
        return open_store(self.store, durability=self.durability)


class RunDescription(BaseModel):
    """A run as its handles see it: what the actor's ``describe()`` answers (never the token)
    and what every ``Orchestrator`` handle is built from."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    max_parallel: int
    """The cap as requested (``set_max_parallel``); handles clamp it."""
    semaphore_scope: str
    caller: SkipValidation[ToolCaller | None] = None
    state_type: SkipValidation[type[BaseModel] | None] = None
    """The run's state model (None: unknown to this handle)."""
    checkpoint_every: int = 1_000
    keep_versions: int | None = DEFAULT_KEEP_VERSIONS
    keep_days: float | None = None


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
    pid: int = 0
    """The process id of the orchestrator actor (changes when it restarts)."""
    host: str | None = None
    """The run host holding the run (None: a dedicated actor of its own)."""
    epoch: int | None = None
    """The run's fencing epoch as this activation took it (None: a run without a store)."""
    node: str | None = None
    """The id of the Ray node of the orchestrator's process (a run stored in a database moves
    to another node when its node is lost)."""
