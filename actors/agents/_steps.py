"""The journal of agent steps, shared by the framework adapters (pydantic-ai, OpenAI Agents).

A run that hosts agent runs keeps an ``AgentJournal``: each agent run (keyed
``<name>/<run id>``) holds its committed steps in order, a model step the model's response,
a tool step the tool's outcome. A step is the delta, never the conversation: the
conversation is what replaying the steps rebuilds, so the journal (whose entries are diffs
of this state) grows by one step per step.

``RunSteps`` is the per-run view an adapter's wrappers share through a context variable:
what was committed when the run (re)started, the next model step's key, and ``commit``.
Nothing here knows a framework: each adapter decides what a step's ``data`` holds.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from actors.agents._durable_errors import DurableAgentConfigError
from actors.exceptions import OrchestratorNotFound
from actors.handoffs.settings import HandoffSettings, HandoffTarget
from actors.orchestrator.facade import Orchestrator
from cluster.storage import Store
from coordinators import AgentState

__all__ = ["AgentJournal", "RunOptions", "StepRecord", "RunSteps", "committed_steps", "current_steps", "open_run",
           "run_steps"]


class StepRecord(BaseModel):
    """One committed step of an agent run.

    ``key`` is the step's deterministic name in its run: ``model:<n>`` for the n-th model
    request, ``tool:<n>:<tool call id>`` for a tool call answering the n-th response.
    ``data``: the model's response as the framework's own JSON (model steps), or the tool's
    outcome (``{"return": value}``, ``{"retry": message}``...).
    """

    model_config = ConfigDict(frozen=True)

    key: str
    kind: Literal["model", "tool"]
    name: str = ""
    """The tool's name (tool steps) or the agent's (model steps, where the adapter records
    it); checked when the step is answered from the journal."""
    data: Any = None


class AgentJournal(AgentState):
    """The state of a run that hosts agent runs: their steps, by agent run.

    An ``AgentState`` (empty but for the run record), so that a tool call waiting for approval
    is an interrupt of the run, read and answered as every run's are (``soloist approve``).
    """

    runs: dict[str, list[StepRecord]] = Field(default_factory=dict)
    """Committed steps of each agent run, in commit order, keyed ``<agent name>/<run id>``."""


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """Where an adapter's agent runs live: one orchestrator per run id (named by the adapter,
    kept in ``store`` when one is given, with these settings), or the one ``orchestrator``
    the user passed for all of them."""

    store: str | Store | None = None
    orchestrator: Orchestrator[Any] | None = None
    durability: str = "sync"
    max_parallel: int = 4
    semaphore_scope: str | None = None
    checkpoint_every: int = 0


async def open_run(name: str, options: RunOptions) -> tuple[Orchestrator[Any], bool]:
    """The orchestrator of the run ``name``, and whether this call opened it (and so closes
    it after): the user's, a stored one taken up again, or a new one."""
    if options.orchestrator is not None:
        return options.orchestrator, False
    if options.store is not None:
        try:
            return await asyncio.to_thread(Orchestrator.attach, name, store=options.store), True
        except OrchestratorNotFound:
            pass  # a new run
    orch = await Orchestrator.open(AgentJournal(), name=name, store=options.store, durability=options.durability,
                                   max_parallel=options.max_parallel, semaphore_scope=options.semaphore_scope,
                                   checkpoint_every=options.checkpoint_every)
    return orch, True


async def committed_steps(orch: Orchestrator[Any], owner: str, run_key: str) -> list[StepRecord]:
    """The steps the run ``orch`` committed for ``run_key``; a run whose state is not an
    ``AgentJournal`` is refused, naming ``owner`` (the wrapper that asked) and the fix."""
    state = await orch.snapshot()
    if not isinstance(state, AgentJournal):
        raise DurableAgentConfigError(
            f"{owner}: run {orch.name!r} holds a state of type {type(state).__name__}, not an AgentJournal; "
            "create it as Orchestrator(AgentJournal(), ...)")
    return list(state.runs.get(run_key, []))


@dataclasses.dataclass(frozen=True)
class _AppendStep:
    """The write that commits one step (a module-level class: it travels to the run's actor)."""

    run_key: str
    record: StepRecord

    def __call__(self, state: AgentJournal) -> None:
        steps = state.runs.setdefault(self.run_key, [])
        if any(step.key == self.record.key for step in steps):
            return  # committed already (a resend of the same write): nothing new
        steps.append(self.record)


class _LiveCaller:
    """The run's handoff target with this process's model caller: a resumed run sends its
    model requests to the model the wrapper holds now, not to whatever the run stored."""

    def __init__(self, orch: Orchestrator[Any], caller: Any) -> None:
        self._orch = orch
        self._caller = caller

    def handoff_settings(self) -> HandoffSettings:
        return dataclasses.replace(self._orch.handoff_settings(), caller=self._caller)

    async def join_semaphore(self) -> None:
        await self._orch.join_semaphore()

    async def refresh_max_parallel(self) -> int:
        return await self._orch.refresh_max_parallel()


class RunSteps:
    """One agent run's steps: the committed ones (answered from here on a replay) and the
    commit of new ones. Model steps are numbered in request order (a run requests one at a
    time), from ``first_model_step`` (a run continued from a framework's saved state starts
    after the responses that state holds); tool steps take the number of the response whose
    call they answer."""

    def __init__(self, orch: Orchestrator[Any], caller: Any, run_key: str, committed: list[StepRecord], *,
                 first_model_step: int = 0) -> None:
        self.orchestrator = orch
        self.target: HandoffTarget = _LiveCaller(orch, caller)
        self.run_key = run_key
        # key -> record; grows as this process commits, so a key is never committed twice
        self._committed: dict[str, StepRecord] = {step.key: step for step in committed}
        self._model_steps = first_model_step  # the number of the next model step
        self.replayed = 0  # steps answered from the journal
        self.sent = 0  # steps run for real (model requests handed off, tool bodies run)

    def next_model_key(self) -> str:
        key = f"model:{self._model_steps}"
        self._model_steps += 1
        return key

    def model_request_failed(self) -> None:
        """The request of the last model key failed (nothing committed): the number is free
        again, so a framework's own retry asks for the same step, as a replay will."""
        self._model_steps -= 1

    def tool_key(self, tool_call_id: str) -> str:
        # The tool calls of response n run after model step n was requested (counter n + 1).
        return f"tool:{self._model_steps - 1}:{tool_call_id}"

    def recorded(self, key: str) -> StepRecord | None:
        record = self._committed.get(key)
        if record is not None:
            self.replayed += 1
        return record

    async def commit(self, record: StepRecord) -> None:
        """Commit ``record`` through the run's single writer before the agent goes on; the
        request id makes a resent commit (after a lost acknowledgement) apply nothing."""
        self.sent += 1
        await self.orchestrator.apply(_AppendStep(self.run_key, record), request_id=f"{self.run_key}#{record.key}")
        self._committed[record.key] = record


_current: contextvars.ContextVar[RunSteps | None] = contextvars.ContextVar("soloist_agent_run", default=None)


def current_steps() -> RunSteps | None:
    """The steps of the agent run this code runs in (None outside a durable agent run)."""
    return _current.get()


class run_steps:
    """Context manager: ``steps`` is the current run's for the code inside (tasks it starts
    inherit it)."""

    def __init__(self, steps: RunSteps) -> None:
        self._steps = steps
        self._token: contextvars.Token[RunSteps | None] | None = None

    def __enter__(self) -> RunSteps:
        self._token = _current.set(self._steps)
        return self._steps

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _current.reset(self._token)
