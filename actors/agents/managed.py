"""``ManagedAgent``: the one source of truth about a subagent or coordinator actor of a run.

A discriminated union on ``lifecycle`` (after paseo's ``ManagedAgent``), so combinations
that make no sense cannot be built: an ``error`` agent always says why, a ``closed`` agent
holds no live handle. Every change of lifecycle goes through one guard,
:func:`transition`. Two pure projections derive everything else from it:
:func:`to_stored_record` (what the store keeps) and :func:`to_payload` (what subscribers
and ``soloist status`` see). Both return fresh JSON-clean dicts with ISO timestamps and no
live handle, so mutating a projection never touches the agent.

Lifecycles:

- ``initializing``: the actor is being created (or re-created after a loss or a restart).
- ``idle``: the actor exists and is not working for the run right now.
- ``running``: the actor is working for the run (recorded at batch granularity at most).
- ``error``: the actor failed or was lost; ``last_error`` says how. It may be re-created.
- ``closed``: the run no longer uses it; terminal, no handle.
"""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Annotated, Any, Final, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from actors.exceptions import IllegalLifecycleTransition

__all__ = [
    "AgentConfig",
    "AgentKind",
    "ALLOWED_TRANSITIONS",
    "ClosedAgent",
    "ErrorAgent",
    "IdleAgent",
    "IllegalLifecycleTransition",
    "InitializingAgent",
    "Lifecycle",
    "ManagedAgent",
    "RECORD_VERSION",
    "RunningAgent",
    "StoredAgentRecord",
    "from_stored_record",
    "new_agent",
    "to_payload",
    "to_stored_record",
    "transition",
]

Lifecycle = Literal["initializing", "idle", "running", "error", "closed"]
AgentKind = Literal["subagent", "coordinator"]
RECORD_VERSION: Final = 1

#: The one table of allowed lifecycle changes. ``initializing`` is reachable from every
#: live or failed state because an actor can be lost at any time and re-created.
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    "initializing": frozenset({"idle", "error", "closed"}),
    "idle": frozenset({"running", "error", "closed", "initializing"}),
    "running": frozenset({"idle", "error", "closed", "initializing"}),
    "error": frozenset({"initializing", "closed"}),
    "closed": frozenset(),
}



class AgentConfig(BaseModel):
    """How to (re-)create the agent's actor. JSON-clean: it is stored with the record.

    ``actor_name`` is the Ray actor name (subagent replicas are named, so a re-creation
    finds the live one); ``extra`` holds kind-specific data such as a pickled coordinator.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    skill: str | None = None
    node: str | None = None
    replicas: int | None = None
    slot: int | None = None
    actor_name: str | None = None
    num_cpus: float | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class _AgentBase(BaseModel):
    """Fields every lifecycle shares. ``handle`` is the live Ray actor handle, or None for an
    agent restored from the store and not used yet (it is re-created on first use)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, extra="forbid")

    agent_id: str = Field(min_length=1)
    run: str
    kind: AgentKind
    config: AgentConfig = Field(default_factory=AgentConfig)
    created_at: datetime
    updated_at: datetime
    title: str | None = None
    restarts: int = Field(default=0, ge=0)
    """How many times the actor was re-created after the first creation."""


class InitializingAgent(_AgentBase):
    """The actor is being created; there is no handle yet."""

    lifecycle: Literal["initializing"] = "initializing"
    handle: None = Field(default=None, exclude=True, repr=False)


class IdleAgent(_AgentBase):
    """The actor exists and waits for work."""

    lifecycle: Literal["idle"] = "idle"
    handle: Any = Field(default=None, exclude=True, repr=False)


class RunningAgent(_AgentBase):
    """The actor is working for the run."""

    lifecycle: Literal["running"] = "running"
    handle: Any = Field(default=None, exclude=True, repr=False)


class ErrorAgent(_AgentBase):
    """The actor failed or was lost; ``last_error`` (required, non-empty) says how."""

    lifecycle: Literal["error"] = "error"
    last_error: str = Field(min_length=1)
    handle: Any = Field(default=None, exclude=True, repr=False)


class ClosedAgent(_AgentBase):
    """The run is done with this agent; there is no live handle, ever again."""

    lifecycle: Literal["closed"] = "closed"
    last_error: str | None = None
    handle: None = Field(default=None, exclude=True, repr=False)


ManagedAgent = Annotated[
    Union[InitializingAgent, IdleAgent, RunningAgent, ErrorAgent, ClosedAgent],
    Field(discriminator="lifecycle"),
]
_MANAGED = TypeAdapter(ManagedAgent)
_BY_LIFECYCLE: dict[str, type[InitializingAgent | IdleAgent | RunningAgent | ErrorAgent | ClosedAgent]] = {
    "initializing": InitializingAgent,
    "idle": IdleAgent,
    "running": RunningAgent,
    "error": ErrorAgent,
    "closed": ClosedAgent,
}


class StoredAgentRecord(BaseModel):
    """The stored form of an agent (what :func:`to_stored_record` produces); validated when
    a record is read back, so a damaged record is reported instead of guessed at."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    record_version: Literal[1] = RECORD_VERSION
    agent_id: str = Field(min_length=1)
    run: str
    kind: AgentKind
    lifecycle: Lifecycle
    last_error: str | None = None
    config: AgentConfig
    created_at: datetime
    updated_at: datetime
    title: str | None = None
    restarts: int = Field(ge=0)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def new_agent(
    agent_id: str, *, run: str, kind: AgentKind, config: AgentConfig | None = None, title: str | None = None,
    now: datetime | None = None,
) -> InitializingAgent:
    """A fresh agent, ``initializing``: the only way an agent comes into being."""
    at = now or _now()
    return InitializingAgent(
        agent_id=agent_id, run=run, kind=kind, config=config or AgentConfig(), created_at=at, updated_at=at, title=title
    )


def transition(
    agent: ManagedAgent,
    target: Lifecycle,
    *,
    handle: Any = None,
    last_error: str | None = None,
    now: datetime | None = None,
) -> ManagedAgent:
    """The one guard: a new agent in lifecycle ``target``, or ``IllegalLifecycleTransition``.

    ``handle`` is kept for ``idle``/``running``/``error`` unless a new one is given;
    ``initializing`` and ``closed`` drop it. Re-entering ``initializing`` counts a restart.
    ``error`` needs ``last_error``. The input agent is never modified.
    """
    current = agent.lifecycle
    if target not in ALLOWED_TRANSITIONS.get(current, frozenset()):
        raise IllegalLifecycleTransition(agent.agent_id, current, target, tuple(sorted(ALLOWED_TRANSITIONS.get(current, ()))))
    fields: dict[str, Any] = agent.model_dump(exclude={"lifecycle", "handle", "last_error"})
    fields["updated_at"] = now or _now()
    if target == "initializing":
        fields["restarts"] = agent.restarts + 1
    elif target in ("idle", "running", "error"):
        fields["handle"] = handle if handle is not None else getattr(agent, "handle", None)
    if target == "error":
        if not last_error:
            raise ValueError(f"agent {agent.agent_id!r}: moving to 'error' needs last_error (why it failed)")
        fields["last_error"] = last_error
    elif target == "closed":
        fields["last_error"] = getattr(agent, "last_error", None)
    return _BY_LIFECYCLE[target].model_validate(fields)


def _iso(value: datetime) -> str:
    return value.astimezone(timezone.utc).isoformat()


def to_stored_record(agent: ManagedAgent) -> dict[str, Any]:
    """What the store keeps: every field but the live handle, ISO timestamps, deep copies."""
    return {
        "record_version": RECORD_VERSION,
        "agent_id": agent.agent_id,
        "run": agent.run,
        "kind": agent.kind,
        "lifecycle": agent.lifecycle,
        "last_error": getattr(agent, "last_error", None),
        "config": copy.deepcopy(agent.config.model_dump(mode="json")),
        "created_at": _iso(agent.created_at),
        "updated_at": _iso(agent.updated_at),
        "title": agent.title,
        "restarts": agent.restarts,
    }


def to_payload(agent: ManagedAgent) -> dict[str, Any]:
    """What clients see (``agent_state`` events, ``soloist status``): the public fields,
    ISO timestamps, ``live`` (whether a handle is held) instead of the handle itself, and
    the config without ``extra`` (which may hold pickled code)."""
    config = agent.config.model_dump(mode="json", exclude={"extra"})
    return {
        "agent_id": agent.agent_id,
        "run": agent.run,
        "kind": agent.kind,
        "lifecycle": agent.lifecycle,
        "last_error": getattr(agent, "last_error", None),
        "live": getattr(agent, "handle", None) is not None,
        "config": copy.deepcopy(config),
        "created_at": _iso(agent.created_at),
        "updated_at": _iso(agent.updated_at),
        "title": agent.title,
        "restarts": agent.restarts,
    }


def from_stored_record(record: dict[str, Any]) -> ManagedAgent:
    """The agent a stored record describes, without a handle (re-created on first use).

    Raises pydantic's ``ValidationError`` if the record is damaged; callers that read a
    store turn it into the store's ``StoreCorrupted``.
    """
    stored = StoredAgentRecord.model_validate(record)
    fields = stored.model_dump(exclude={"record_version"})
    if stored.lifecycle != "error" and stored.lifecycle != "closed":
        fields.pop("last_error")
    return _MANAGED.validate_python(fields)
