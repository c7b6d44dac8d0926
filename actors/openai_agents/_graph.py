"""The run's copy of the user's agents: the same agents, their model and tools journalled.

As the SDK's other durable integrations do (DBOS's runner clones the agent), the user's
``Agent`` objects are never changed: each agent reachable from the starting agent through
its handoffs is cloned once per run with ``SoloistModel`` as its model and its function
tools journalled; a handoff to an agent hands off to that agent's clone, so every agent's
steps are journalled in the same run. Guardrails, instructions, output types, hooks and the
handoffs' own filters stay as the user wrote them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agents import Agent, Handoff
from agents.models.default_models import get_default_model_settings
from agents.models.interface import Model
from agents.tool import FunctionTool

from actors._pickle_check import explain_unpicklable
from actors.agents._durable_errors import DurableAgentConfigError
from actors.exceptions import NotPicklable
from actors.openai_agents._model import ModelFactory, ModelRef, SoloistModel, _pickled
from actors.openai_agents._tools import journalled

__all__ = ["AgentGraph"]


def _model_name(selection: Any) -> str | None:
    if isinstance(selection, str):
        return selection
    name = getattr(selection, "model", None)
    return name if isinstance(name, str) else None


class AgentGraph:
    """Clones of the agents of one run, made on first use (handoffs may form cycles)."""

    def __init__(self, *, skill: str, factory: ModelFactory | None, run_model: str | Model | None) -> None:
        self._skill = skill
        self._factory = factory
        self._run_model = run_model  # RunConfig.model: every agent's model when set
        self._clones: dict[int, Agent[Any]] = {}  # id(user's agent) -> its clone; the agent is kept alive by its clone's run
        self._blobs: dict[int, str] = {}  # id(model object) -> its pickle, made once per run

    def _ref(self, agent: Agent[Any], selection: Any) -> ModelRef:
        if self._factory is not None:
            return ModelRef(name=_model_name(selection))
        if selection is None or isinstance(selection, str):
            return ModelRef(name=selection)
        if not isinstance(selection, Model):
            raise DurableAgentConfigError(f"agent {agent.name!r}: its model is a {type(selection).__name__}, "
                                          "not a model name or an agents.Model")
        blob = self._blobs.get(id(selection))
        if blob is None:
            problem = explain_unpicklable(selection, f"the model of agent {agent.name!r}")
            if problem is not None:
                raise NotPicklable(f"{problem} Or pass SoloistRunner(model_factory=...) (a module-level function "
                                   "taking the model name and returning the model): each model subagent then "
                                   "builds its own")
            blob = self._blobs[id(selection)] = _pickled(selection)
        return ModelRef(name=_model_name(selection), blob=blob)

    def wrap(self, agent: Agent[Any]) -> Agent[Any]:
        """The run's clone of ``agent`` (itself, when it is a clone already)."""
        if isinstance(agent.model, SoloistModel):
            return agent
        known = self._clones.get(id(agent))
        if known is not None:
            return known
        selection = self._run_model if self._run_model is not None else agent.model
        changes: dict[str, Any] = {
            "model": SoloistModel(self._ref(agent, selection), agent=agent.name, skill=self._skill),
            "tools": [journalled(tool) if isinstance(tool, FunctionTool) else tool for tool in agent.tools],
        }
        if not isinstance(selection, Model) and agent._uses_implicit_model_settings():
            # The SDK derives a named model's default settings from its name; a Model object
            # gets none: keep what the user's agent would have sent.
            changes["model_settings"] = get_default_model_settings(selection)
        clone = agent.clone(**changes)
        self._clones[id(agent)] = clone
        clone.handoffs = [self._wrap_handoff(h) for h in agent.handoffs]
        return clone

    def _wrap_handoff(self, target: Agent[Any] | Handoff[Any, Any]) -> Agent[Any] | Handoff[Any, Any]:
        if isinstance(target, Agent):
            return self.wrap(target)
        if isinstance(target, Handoff):
            invoke = target.on_invoke_handoff

            async def on_invoke_handoff(ctx: Any, arguments: str) -> Agent[Any]:
                return self.wrap(await invoke(ctx, arguments))

            return dataclasses.replace(target, on_invoke_handoff=on_invoke_handoff)
        raise DurableAgentConfigError(f"a handoff is a {type(target).__name__}, not an agents.Agent or a Handoff")
