"""``SoloistRunner``: ``Runner.run`` for OpenAI Agents SDK agents, each run a durable soloist run.

Like the SDK's other durable integrations (Temporal's ``OpenAIAgentsPlugin``, DBOS's
runner), it replaces ``Runner.run`` and keeps ``Agent``, tools, handoffs and guardrails as
the user wrote them: ``await SoloistRunner(store=...).run(agent, input, run_id=...)`` returns
the SDK's own ``RunResult``. Each run lives in a soloist ``Orchestrator`` (named
``<runner name>.<run id>``, kept in ``store`` when one is given, or the one the user passes).
Every model request is a handoff to the model subagent under the run's cap and every
function-tool call runs in place; both are committed through the run's single writer before
the agent goes on. Run again with the same ``run_id`` after a crash and the run replays:
committed steps are answered from the journal and it continues from the first step that was
not committed. A request in flight at the crash is sent once more.

Tools declared ``needs_approval`` stop the run with ``RunResult.interruptions``, as without
soloist, and open one soloist interrupt per call: the run waits durably, answered by
``soloist approve``, the runs page or ``actors.answer_interrupt`` from any process. Run it
again with the same ``run_id`` once answered and it replays to the interruption (nothing
sent again), gives the SDK the person's answers and goes on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import uuid
from typing import Any

from agents import Agent, RunConfig, Runner, RunResult, RunState
from agents.items import ToolApprovalItem
from agents.models.multi_provider import MultiProvider

from actors._pickle_check import explain_unpicklable
from actors.agents._approval_interrupts import ApprovalAnswer, approval_answers, approval_question, open_approvals
from actors.agents._durable_errors import DurableAgentConfigError
from actors.agents._steps import RunOptions, RunSteps, committed_steps, open_run, run_steps
from actors.exceptions import NotPicklable
from actors.openai_agents._graph import AgentGraph
from actors.openai_agents._model import MODEL_SKILL_PREFIX, ModelFactory, ModelSource, model_registry
from actors.orchestrator.facade import DEFAULT_MAX_PARALLEL, Orchestrator
from cluster.storage import Store

__all__ = ["SoloistRunner"]

_log = logging.getLogger("soloist.openai_agents")


def _call_of(item: ToolApprovalItem) -> tuple[str, str, Any]:
    """The call id, tool name and arguments of a call waiting for approval."""
    raw = item.raw_item
    get = raw.get if isinstance(raw, dict) else (lambda field: getattr(raw, field, None))
    call_id = str(get("call_id") or get("id") or "")
    arguments = get("arguments")
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        args = arguments  # shown to the person as the model wrote it
    return call_id, str(item.tool_name or get("name") or ""), args


class SoloistRunner:
    """Runs OpenAI Agents SDK agents durably on soloist; ``run`` / ``run_sync`` as ``Runner``'s.

    ``name`` names the model subagent's skill and each run's orchestrator
    (``run_name(run_id)``). ``store`` (a SQLite path, a PostgreSQL URL or a store object) keeps
    each run's journal so that a run can be resumed by running it again with the same
    ``run_id``; None keeps runs in memory. ``orchestrator`` hosts every run in one existing
    run of yours instead (its state must be an ``AgentJournal``). ``model_factory(name)``, a
    module-level function, builds each agent's model in the model subagent from the agent's
    model name; without it a named model comes from the SDK's default provider (configured
    by the replica's environment) and a ``Model`` object travels pickled. ``replicas`` bounds
    the model subagents; ``max_parallel`` and ``semaphore_scope`` are the runs' cap and the
    cluster-wide scope it is counted in (one scope per model endpoint shares the cap).
    """

    def __init__(
        self,
        *,
        name: str = "openai-agents",
        store: str | Store | None = None,
        orchestrator: Orchestrator[Any] | None = None,
        model_factory: ModelFactory | None = None,
        replicas: int = 4,
        max_parallel: int = DEFAULT_MAX_PARALLEL,
        semaphore_scope: str | None = None,
        durability: str = "sync",
        checkpoint_every: int = 0,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise DurableAgentConfigError("SoloistRunner needs a name: it names the model subagent and the runs to "
                                          f"resume; got {name!r}")
        if orchestrator is not None and store is not None:
            raise DurableAgentConfigError(f"SoloistRunner {name!r}: pass store= or orchestrator=, not both "
                                          "(an orchestrator keeps its runs in its own store)")
        if orchestrator is not None and not isinstance(orchestrator, Orchestrator):
            raise DurableAgentConfigError(f"SoloistRunner {name!r}: orchestrator must be an Orchestrator, "
                                          f"got {type(orchestrator).__name__}")
        if model_factory is not None:
            if not callable(model_factory):
                raise DurableAgentConfigError(f"SoloistRunner {name!r}: model_factory must be a callable taking a model "
                                              f"name and returning an agents.Model, got {type(model_factory).__name__}")
            problem = explain_unpicklable(model_factory, f"the model_factory of SoloistRunner {name!r}")
            if problem is not None:
                raise NotPicklable(f"{problem} The factory travels to each model subagent: make it a module-level "
                                   "function that creates its clients when called")
        self._name = name
        self._factory = model_factory
        self._runs = RunOptions(store=store, orchestrator=orchestrator, durability=durability, max_parallel=max_parallel,
                                semaphore_scope=semaphore_scope, checkpoint_every=checkpoint_every)
        self._skill = MODEL_SKILL_PREFIX + name
        self._registry = model_registry(name, ModelSource(model_factory), replicas=replicas)

    @property
    def name(self) -> str:
        return self._name

    def run_name(self, run_id: str) -> str:
        """The orchestrator name of the run ``run_id`` when the runner opens one per run."""
        return f"{self._name}.{run_id}"

    def _run_config(self, run_config: Any) -> RunConfig:
        config = run_config if run_config is not None else RunConfig()
        if not isinstance(config, RunConfig):
            raise DurableAgentConfigError(f"SoloistRunner {self._name!r}: run_config must be an agents.RunConfig, "
                                          f"got {type(config).__name__}")
        if self._factory is None and type(config.model_provider) is not MultiProvider:
            raise DurableAgentConfigError(
                f"SoloistRunner {self._name!r}: the run_config's model_provider "
                f"({type(config.model_provider).__name__}) cannot reach the model subagents; pass "
                "SoloistRunner(model_factory=...), a module-level function that builds the model from its name")
        return config

    async def run(self, starting_agent: Agent[Any], input: str | list[Any] | RunState[Any], *,
                  run_id: str | None = None, **kwargs: Any) -> RunResult:
        """``Runner.run(starting_agent, input, **kwargs)``, durably, as the run ``run_id``
        (default: a new one; the same id after a crash resumes it). ``input`` may be a
        ``RunState`` (``result.to_state()`` with your approvals): the run goes on from it."""
        if not isinstance(starting_agent, Agent):
            raise DurableAgentConfigError(
                f"SoloistRunner.run: starting_agent must be an agents.Agent, got {type(starting_agent).__name__}")
        config = self._run_config(kwargs.pop("run_config", None))
        graph = AgentGraph(skill=self._skill, factory=self._factory, run_model=config.model)
        config = dataclasses.replace(config, model=None)  # every agent's model is its SoloistModel now
        agent = graph.wrap(starting_agent)
        first_model_step = 0
        if isinstance(input, RunState):
            # A saved state continues after the responses it holds; its agent runs as the run's clone.
            first_model_step = len(input._model_responses)
            if input._current_agent is not None:
                input._current_agent = graph.wrap(input._current_agent)
        run_id = run_id or uuid.uuid4().hex
        orch, opened = await open_run(self.run_name(run_id), self._runs)
        try:
            run_key = f"{self._name}/{run_id}"
            steps = RunSteps(orch, self._registry, run_key,
                             await committed_steps(orch, f"SoloistRunner {self._name!r}", run_key),
                             first_model_step=first_model_step)
            with run_steps(steps):
                result = await Runner.run(agent, input, run_config=config, **kwargs)
                while result.interruptions:
                    answers = await self._answers(orch, run_id, result.interruptions)
                    if answers is None:
                        break  # the run waits for a person
                    state = result.to_state()
                    for item in result.interruptions:
                        answer = answers[_call_of(item)[0]]
                        if answer.approved:
                            state.approve(item)
                        else:
                            state.reject(item, rejection_message=f"rejected by a person: {answer.reason}"
                                         if answer.reason else "rejected by a person")
                    kwargs.pop("context", None)  # the state carries the run's context
                    result = await Runner.run(agent, state, run_config=config, **kwargs)
            _log.info("agent run %s: %d step(s) answered from the journal, %d run", run_key, steps.replayed, steps.sent,
                      extra={"component": "openai_agents", "run": orch.name})
            return result
        finally:
            if opened:
                await orch.close()

    async def _answers(self, orch: Orchestrator[Any], run_id: str,
                       interruptions: list[ToolApprovalItem]) -> dict[str, ApprovalAnswer] | None:
        """Open an interrupt per call waiting for approval (once); the answers when every one
        of them is answered, else None."""
        calls = []
        for item in interruptions:
            call_id, tool, args = _call_of(item)
            agent = item.agent.name if item.agent is not None else self._name
            calls.append(approval_question(agent, run_id, tool, args, call_id))
        await open_approvals(orch, self._name, run_id, tuple(calls))
        answered = approval_answers(await orch.snapshot(), run_id)
        if answered is None or any(call["tool_call_id"] not in answered for call in calls):
            return None
        return answered

    def run_sync(self, starting_agent: Agent[Any], input: str | list[Any] | RunState[Any], *,
                 run_id: str | None = None, **kwargs: Any) -> RunResult:
        """``run`` from synchronous code (not from inside a running event loop), as
        ``Runner.run_sync``."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(starting_agent, input, run_id=run_id, **kwargs))
        raise DurableAgentConfigError("SoloistRunner.run_sync cannot run inside an event loop; await run() instead")
