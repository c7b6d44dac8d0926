"""``SoloistAgent``: a pydantic-ai agent, unchanged, whose runs are durable soloist runs.

Like pydantic-ai's own durable wrappers (``TemporalAgent``, ``DBOSAgent``) it takes the
user's ``Agent`` and offers the same ``run`` / ``run_sync`` / ``iter`` with the same result
types. Each agent run lives in a soloist ``Orchestrator``: one the wrapper opens per run id
(named ``<agent name>.<run id>``, kept in ``store`` when one is given), or the one the user
passes. Every model request is a handoff to the model subagent under the run's cap, and
every tool call runs in place; both are committed through the run's single writer before
the agent goes on. Run again with the same ``run_id`` after a crash and the agent replays:
committed steps are answered from the journal (no model request is sent again, no tool body
runs again) and the run continues from the first step that was not committed. A request in
flight at the crash is sent once more.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai.agent import AbstractAgent, AgentRun, WrapperAgent
from pydantic_ai.models import Model, infer_model
from pydantic_ai.output import OutputDataT
from pydantic_ai.tools import AgentDepsT
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults
from pydantic_ai.toolsets import AbstractToolset

from actors._pickle_check import explain_unpicklable
from actors.agents._steps import RunOptions, RunSteps, committed_steps, open_run, run_steps
from actors.exceptions import NotPicklable
from actors.orchestrator.facade import DEFAULT_MAX_PARALLEL, Orchestrator
from actors.pydantic_ai._approvals import answers, open_approvals
from actors.pydantic_ai._model import MODEL_SKILL_PREFIX, ModelSource, SoloistModel, model_registry
from actors.pydantic_ai._toolset import journalled
from actors.pydantic_ai.exceptions import DurableAgentConfigError
from cluster.storage import Store

__all__ = ["SoloistAgent"]

_log = logging.getLogger("soloist.pydantic_ai")


def _driver_model(name: str, model: Any, factory: Callable[[], Model] | None) -> tuple[Model, ModelSource]:
    """The model the driver consults for metadata, and the source replicas build theirs from."""
    if factory is not None:
        if not callable(factory):
            raise DurableAgentConfigError(f"SoloistAgent {name!r}: model_factory must be a callable returning a Model, "
                                          f"got {type(factory).__name__}")
        problem = explain_unpicklable(factory, f"the model_factory of agent {name!r}")
        if problem is not None:
            raise NotPicklable(problem)
        built = factory()
        if not isinstance(built, Model):
            raise DurableAgentConfigError(f"SoloistAgent {name!r}: model_factory() returned a {type(built).__name__}, "
                                          "not a pydantic_ai Model")
        return built, ModelSource(factory=factory)
    if model is None:
        raise DurableAgentConfigError(
            f"SoloistAgent {name!r}: the agent has no model; set Agent(model=...) or pass model_factory=... "
            "(a model given only at run time cannot be sent to the model subagents)")
    if isinstance(model, str):
        return infer_model(model), ModelSource(model=model)
    if not isinstance(model, Model):
        raise DurableAgentConfigError(f"SoloistAgent {name!r}: the agent's model is a {type(model).__name__}, not a Model")
    problem = explain_unpicklable(model, f"the model of agent {name!r}")
    if problem is not None:
        raise NotPicklable(f"{problem} Or pass model_factory=... (a module-level function returning the model): "
                           "each model subagent then builds its own")
    return model, ModelSource(model=model)


class SoloistAgent(WrapperAgent[AgentDepsT, OutputDataT]):
    """``wrapped`` with durable runs on soloist; ``run``, ``run_sync`` and ``iter`` as the agent's.

    ``name`` (default: the agent's) names the model subagent's skill and each run's
    orchestrator; an agent without one is refused. ``store`` (a SQLite path, a PostgreSQL
    URL or a store object) keeps each run's journal so that a run can be resumed, after a
    crash, by running it again with the same ``run_id``; None keeps runs in memory.
    ``orchestrator`` hosts every run in one existing run of yours instead (its state must be
    an ``AgentJournal``). The model travels to the model subagents pickled; one that cannot
    (it holds a client or a lock) needs ``model_factory``, a module-level function that
    builds it in each replica. ``replicas`` bounds the model subagents; ``max_parallel`` and
    ``semaphore_scope`` are the runs' cap and the cluster-wide scope it is counted in.

    ``checkpoint_every`` (default 0: never) is passed to the runs the wrapper opens. A run's
    state *is* its steps, and its journal holds each step once, as it was committed; a
    checkpoint would store every step a second time (a closed run is checkpointed), so by
    default a run is rebuilt from its journal when it is taken up again.
    """

    def __init__(
        self,
        wrapped: AbstractAgent[AgentDepsT, OutputDataT],
        *,
        name: str | None = None,
        store: str | Store | None = None,
        orchestrator: Orchestrator[Any] | None = None,
        model_factory: Callable[[], Model] | None = None,
        replicas: int = 4,
        max_parallel: int = DEFAULT_MAX_PARALLEL,
        semaphore_scope: str | None = None,
        durability: str = "sync",
        checkpoint_every: int = 0,
    ) -> None:
        super().__init__(wrapped)
        agent_name = name if name is not None else wrapped.name
        if not isinstance(agent_name, str) or not agent_name.strip():
            raise DurableAgentConfigError(
                "SoloistAgent needs a name: it names the agent's model subagent and the runs to resume; "
                "set Agent(..., name='...') or pass SoloistAgent(agent, name='...')")
        if orchestrator is not None and store is not None:
            raise DurableAgentConfigError(f"SoloistAgent {agent_name!r}: pass store= or orchestrator=, not both "
                                          "(an orchestrator keeps its runs in its own store)")
        if orchestrator is not None and not isinstance(orchestrator, Orchestrator):
            raise DurableAgentConfigError(f"SoloistAgent {agent_name!r}: orchestrator must be an Orchestrator, "
                                          f"got {type(orchestrator).__name__}")
        self._name = agent_name
        self._store = store
        self._orchestrator = orchestrator
        self._runs = RunOptions(store=store, orchestrator=orchestrator, durability=durability, max_parallel=max_parallel,
                                semaphore_scope=semaphore_scope, checkpoint_every=checkpoint_every)
        driver_model, source = _driver_model(agent_name, wrapped.model, model_factory)
        self._model = SoloistModel(driver_model, skill=MODEL_SKILL_PREFIX + agent_name)
        self._registry = model_registry(agent_name, source, replicas=replicas)
        self._toolsets = [toolset.visit_and_replace(journalled) for toolset in wrapped.toolsets]

    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, value: str | None) -> None:
        raise DurableAgentConfigError("a SoloistAgent's name is fixed: its runs are found by it")

    @property
    def model(self) -> Model:
        return self._model

    @property
    def toolsets(self) -> Sequence[AbstractToolset[AgentDepsT]]:
        return self._toolsets

    def run_name(self, run_id: str) -> str:
        """The orchestrator name of the run ``run_id`` when the wrapper opens one per run."""
        return f"{self._name}.{run_id}"

    async def deferred_tool_results(self, run_id: str) -> DeferredToolResults | None:
        """The answers to the approvals the run ``run_id`` waits for, as pydantic-ai takes them
        (``agent.run(..., message_history=..., deferred_tool_results=...)``); None while one is
        still open. A run that ended with ``DeferredToolRequests`` opened an interrupt per call
        that needs approval: answer it with ``soloist approve``, the runs page or
        ``actors.answer_interrupt``, from any process."""
        if self._orchestrator is not None:
            state = await self._orchestrator.snapshot()
        else:
            orch = await asyncio.to_thread(Orchestrator.attach, self.run_name(run_id), store=self._store)
            try:
                state = await orch.snapshot()
            finally:
                await orch.close()
        return answers(state, self._name, run_id)

    async def _steps(self, orch: Orchestrator[Any], run_id: str) -> RunSteps:
        run_key = f"{self._name}/{run_id}"
        return RunSteps(orch, self._registry, run_key, await committed_steps(orch, f"SoloistAgent {self._name!r}", run_key))

    @asynccontextmanager
    async def iter(self, user_prompt: Any = None, **kwargs: Any) -> AsyncIterator[AgentRun[AgentDepsT, Any]]:
        """``Agent.iter``, durably: the agent's graph runs here, its model requests and tool
        calls are the run's journalled steps. ``run_id`` names the run to resume (default: a
        new one); a model given at run time is refused (the model subagents run the agent's)."""
        if kwargs.get("model") is not None:
            raise DurableAgentConfigError(
                f"SoloistAgent {self._name!r}: a model cannot be given at run time; the model subagents run the "
                "agent's model (build another SoloistAgent for another model)")
        run_id = kwargs.pop("run_id", None) or uuid.uuid4().hex
        extra = kwargs.pop("toolsets", None) or ()
        orch, opened = await open_run(self.run_name(run_id), self._runs)
        try:
            steps = await self._steps(orch, run_id)
            toolsets = [*self._toolsets, *(toolset.visit_and_replace(journalled) for toolset in extra)]
            with run_steps(steps), super().override(model=self._model, toolsets=toolsets, tools=[]):
                async with super().iter(user_prompt, run_id=run_id, **kwargs) as agent_run:
                    yield agent_run
            if agent_run.result is not None and isinstance(agent_run.result.output, DeferredToolRequests):
                await open_approvals(orch, self._name, run_id, agent_run.result.output)
            _log.info("agent run %s: %d step(s) answered from the journal, %d run", steps.run_key, steps.replayed,
                      steps.sent, extra={"component": "pydantic_ai", "run": orch.name})
        finally:
            if opened:
                await orch.close()
