"""The command table between a run's handle and its writer: one class per writer operation.

A call of ``Orchestrator.<method>`` becomes one of these commands; a transport carries it to
the run's writer (``OrchestratorActor``) and runs it there with ``command.run(writer)``: the
dedicated actor in ``OrchestratorActor.serve``, a run host in ``RunHostActor`` (inside a
``RunCall`` envelope, which names the run on the host). Each command holds its arguments as
typed fields and states its result type (``Command[R]``), so a reader and a type checker
follow a call from the handle to the code that serves it. The writer's housekeeping
(unloading, abandoning) has no command: no caller can ask for it.

Commands cross Ray on every call (pickled by reference to their class): slots dataclasses,
a few fields each, no copies of the run's state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Generic, TypeVar

from pydantic import BaseModel

from actors.agents.managed import AgentConfig, AgentKind, Lifecycle
from actors.orchestrator._actor import OrchestratorActor
from actors.orchestrator._reload import Reload
from actors.orchestrator.changes import Change
from actors.orchestrator.spec import OrchestratorStatistics, RunDescription, RunSpec
from coordinators import ContextSnapshot, StateTransition

__all__ = [
    "Command", "Version", "Snapshot", "Context", "Changes", "MaxParallel", "History", "StateAt", "MarkRun", "Describe",
    "Statistics", "Apply", "ApplyBatch", "SetMaxParallel", "Close", "AgentCreated", "AgentChanged", "Agents",
    "AgentHandle", "RunCall", "OpenRun", "HostCall",
]

R = TypeVar("R")


def _by_fields(self: Any) -> tuple[Any, tuple[Any, ...]]:
    """Pickle a command as its class and its fields in order: a third of the time and bytes of
    a dataclass's default pickling, paid on both sides of every call."""
    cls = type(self)
    return cls, tuple([getattr(self, field) for field in cls.__match_args__])


class Command(Generic[R]):
    """One operation of a run's writer, with its arguments; ``run`` performs it there."""

    __slots__ = ()

    batched: ClassVar[bool] = True
    """It answers promptly, so a hosted run's call travels with the other calls one event loop
    sends the same host in one turn. A long poll (``Changes``) and what may start or stop
    actors (``Close``, ``AgentHandle``) stay Ray calls of their own."""

    async def run(self, writer: OrchestratorActor) -> R:
        raise NotImplementedError(f"{type(self).__name__} does not say how a writer runs it")

    __reduce__ = _by_fields


# ---------------------------------------------------------------------- reads


@dataclass(frozen=True, slots=True)
class Version(Command[int]):
    async def run(self, writer: OrchestratorActor) -> int:
        return await writer.version()


@dataclass(frozen=True, slots=True)
class Snapshot(Command[tuple[int, BaseModel]]):
    async def run(self, writer: OrchestratorActor) -> tuple[int, BaseModel]:
        return await writer.snapshot()


@dataclass(frozen=True, slots=True)
class Context(Command[ContextSnapshot]):
    async def run(self, writer: OrchestratorActor) -> ContextSnapshot:
        return await writer.context()


@dataclass(frozen=True, slots=True)
class Changes(Command[list[Change]]):
    """Committed events after ``after_seq`` (first poll: after ``since_version``), waiting up
    to ``timeout`` seconds for one."""

    batched: ClassVar[bool] = False
    after_seq: int | None
    since_version: int
    timeout: float

    async def run(self, writer: OrchestratorActor) -> list[Change]:
        return await writer.changes(self.after_seq, self.since_version, self.timeout)


@dataclass(frozen=True, slots=True)
class MaxParallel(Command[int]):
    async def run(self, writer: OrchestratorActor) -> int:
        return await writer.max_parallel()


@dataclass(frozen=True, slots=True)
class History(Command[list[Change]]):
    since: int
    until: int | None

    async def run(self, writer: OrchestratorActor) -> list[Change]:
        return await writer.history(self.since, self.until)


@dataclass(frozen=True, slots=True)
class StateAt(Command[BaseModel]):
    version: int

    async def run(self, writer: OrchestratorActor) -> BaseModel:
        return await writer.state_at(self.version)


@dataclass(frozen=True, slots=True)
class Describe(Command[RunDescription]):
    async def run(self, writer: OrchestratorActor) -> RunDescription:
        return await writer.describe()


@dataclass(frozen=True, slots=True)
class Statistics(Command[OrchestratorStatistics]):
    async def run(self, writer: OrchestratorActor) -> OrchestratorStatistics:
        return await writer.statistics()


# --------------------------------------------------------------------- writes


@dataclass(frozen=True, slots=True)
class Apply(Command[int]):
    """``apply(fn)``: ``fn`` run on a copy of the head state, committed under ``request_id``."""

    token: str
    request_id: str
    fn: Callable[[Any], Any]

    async def run(self, writer: OrchestratorActor) -> int:
        return await writer.apply_fn(self.token, self.request_id, self.fn)


@dataclass(frozen=True, slots=True)
class ApplyBatch(Command[int]):
    """``apply_batch``: transitions through ``reduce``, all or nothing; a compare-and-set when
    ``expected_version`` is given."""

    token: str
    request_id: str
    transitions: tuple[StateTransition, ...]
    expected_version: int | None

    async def run(self, writer: OrchestratorActor) -> int:
        return await writer.apply_batch(self.token, self.request_id, self.transitions, self.expected_version)


@dataclass(frozen=True, slots=True)
class MarkRun(Command[None]):
    token: str
    facts: dict[str, Any]

    async def run(self, writer: OrchestratorActor) -> None:
        await writer.mark_run(self.token, self.facts)


@dataclass(frozen=True, slots=True)
class SetMaxParallel(Command[int]):
    token: str
    n: int

    async def run(self, writer: OrchestratorActor) -> int:
        return await writer.set_max_parallel(self.token, self.n)


@dataclass(frozen=True, slots=True)
class Close(Command[None]):
    """The owner closes the run (its host then forgets it)."""

    batched: ClassVar[bool] = False
    token: str

    async def run(self, writer: OrchestratorActor) -> None:
        await writer.close(self.token)


# ------------------------------------------------------------- managed agents


@dataclass(frozen=True, slots=True)
class AgentCreated(Command[dict[str, Any]]):
    agent_id: str
    kind: AgentKind
    config: AgentConfig
    handle: Any

    async def run(self, writer: OrchestratorActor) -> dict[str, Any]:
        return await writer.agent_created(self.agent_id, self.kind, self.config, self.handle)


@dataclass(frozen=True, slots=True)
class AgentChanged(Command[dict[str, Any]]):
    agent_id: str
    lifecycle: Lifecycle
    last_error: str | None = None

    async def run(self, writer: OrchestratorActor) -> dict[str, Any]:
        return await writer.agent_changed(self.agent_id, self.lifecycle, self.last_error)


@dataclass(frozen=True, slots=True)
class Agents(Command[list[dict[str, Any]]]):
    async def run(self, writer: OrchestratorActor) -> list[dict[str, Any]]:
        return await writer.agents()


@dataclass(frozen=True, slots=True)
class AgentHandle(Command[Any]):
    """The live handle of an agent (re-created from its record on first use)."""

    batched: ClassVar[bool] = False
    agent_id: str

    async def run(self, writer: OrchestratorActor) -> Any:
        return await writer.agent_handle(self.agent_id)


# ------------------------------------------------------------ host envelopes


@dataclass(frozen=True, slots=True)
class RunCall:
    """``command`` for the run named ``run`` on its host. ``reload`` is sent only when the host
    answered ``RunNotHeld`` (a pydantic model costs each side tens of microseconds to pickle):
    with it, the host activates the run from its store."""

    run: str
    reload: Reload | None
    command: Command[Any]

    __reduce__ = _by_fields


@dataclass(frozen=True, slots=True)
class OpenRun:
    """Start ``spec``'s new run on its host (refused past ``max_runs`` runs there)."""

    spec: RunSpec
    owner_job: str | None
    max_runs: int | None


HostCall = RunCall | OpenRun
"""What a host's ``call_one``/``call_many`` take."""
