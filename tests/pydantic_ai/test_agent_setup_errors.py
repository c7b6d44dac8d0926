"""Bad input to ``SoloistAgent`` fails at once, naming what was wrong and the fix (no Ray)."""

from __future__ import annotations

import threading

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from actors import NotPicklable
from actors.pydantic_ai import DurableAgentConfigError, SoloistAgent


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("ok")])


def make_model() -> FunctionModel:
    return FunctionModel(answer)


def test_an_agent_without_a_name_is_refused_with_the_fix() -> None:
    with pytest.raises(DurableAgentConfigError, match=r"SoloistAgent needs a name.*Agent\(\.\.\., name='\.\.\.'\)"):
        SoloistAgent(Agent(FunctionModel(answer)))


def test_a_name_given_to_the_wrapper_is_enough() -> None:
    assert SoloistAgent(Agent(FunctionModel(answer)), name="named-here").name == "named-here"


def test_a_model_that_cannot_be_pickled_is_refused_naming_it_and_model_factory() -> None:
    lock = threading.Lock()

    def locked(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        with lock:
            return ModelResponse(parts=[TextPart("ok")])

    with pytest.raises(NotPicklable, match=r"the model of agent 'locky' cannot be sent to the cluster.*model_factory="):
        SoloistAgent(Agent(FunctionModel(locked), name="locky"))


def test_the_same_model_from_a_factory_is_accepted() -> None:
    durable = SoloistAgent(Agent(name="factory-made"), model_factory=make_model)
    assert durable.model.wrapped.model_name == make_model().model_name


def test_an_agent_without_a_model_is_refused() -> None:
    with pytest.raises(DurableAgentConfigError, match="'no-model': the agent has no model; set Agent\\(model=...\\)"):
        SoloistAgent(Agent(name="no-model"))


def test_a_factory_that_returns_no_model_is_refused() -> None:
    with pytest.raises(DurableAgentConfigError, match=r"model_factory\(\) returned a str, not a pydantic_ai Model"):
        SoloistAgent(Agent(name="bad-factory"), model_factory=lambda: "test")


def test_an_orchestrator_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(DurableAgentConfigError, match="orchestrator must be an Orchestrator, got dict"):
        SoloistAgent(Agent(FunctionModel(answer), name="x"), orchestrator={})  # type: ignore[arg-type]
