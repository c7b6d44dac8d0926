"""Bad input to ``SoloistRunner`` fails at once, naming what was wrong and the fix, before
anything is sent (no Ray: every check runs before a run is opened)."""

from __future__ import annotations

import threading

import pytest
from agents import Agent, OpenAIChatCompletionsModel, OpenAIProvider, RunConfig
from openai import AsyncOpenAI

from actors import NotPicklable, Orchestrator
from actors.openai_agents import DurableAgentConfigError, SoloistRunner
from tests.openai_agents._agents import chat_model, scribe


def test_a_model_factory_that_cannot_be_pickled_is_refused_naming_it() -> None:
    lock = threading.Lock()

    def locked(name: str | None) -> OpenAIChatCompletionsModel:
        with lock:
            return chat_model("http://127.0.0.1:1/v1", name)

    with pytest.raises(NotPicklable, match=r"the model_factory of SoloistRunner 'openai-agents' cannot be sent to the "
                                           r"cluster.*module-level function"):
        SoloistRunner(model_factory=locked)


def test_a_model_factory_that_is_not_callable_is_refused() -> None:
    with pytest.raises(DurableAgentConfigError, match="model_factory must be a callable .* got str"):
        SoloistRunner(model_factory="gpt-4o")  # type: ignore[arg-type]


async def test_a_starting_agent_that_is_not_an_agent_is_refused() -> None:
    with pytest.raises(DurableAgentConfigError, match="starting_agent must be an agents.Agent, got dict"):
        await SoloistRunner().run({"name": "scribe"}, "go")  # type: ignore[arg-type]


async def test_a_model_object_that_cannot_be_pickled_is_refused_naming_the_agent_and_model_factory() -> None:
    agent = Agent(name="held", model=OpenAIChatCompletionsModel(model="m", openai_client=AsyncOpenAI(api_key="k")))
    with pytest.raises(NotPicklable, match=r"the model of agent 'held' cannot be sent to the cluster.*"
                                           r"SoloistRunner\(model_factory=\.\.\.\)"):
        await SoloistRunner().run(agent, "go")


async def test_a_provider_of_your_own_needs_a_model_factory() -> None:
    config = RunConfig(model_provider=OpenAIProvider(api_key="k"))
    with pytest.raises(DurableAgentConfigError, match=r"model_provider \(OpenAIProvider\) cannot reach the model "
                                                      r"subagents; pass SoloistRunner\(model_factory=\.\.\.\)"):
        await SoloistRunner().run(scribe(), "go", run_config=config)


def test_store_and_orchestrator_together_are_refused() -> None:
    with pytest.raises(DurableAgentConfigError, match="pass store= or orchestrator=, not both"):
        SoloistRunner(store="runs.sqlite", orchestrator=object())  # type: ignore[arg-type]


def test_an_orchestrator_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(DurableAgentConfigError, match="orchestrator must be an Orchestrator, got dict"):
        SoloistRunner(orchestrator={})  # type: ignore[arg-type]
    assert Orchestrator  # the type the message asks for is the public one


def test_run_sync_inside_an_event_loop_is_refused_with_the_fix() -> None:
    import asyncio

    async def inside() -> None:
        SoloistRunner().run_sync(scribe(), "go")

    with pytest.raises(DurableAgentConfigError, match=r"cannot run inside an event loop; await run\(\) instead"):
        asyncio.run(inside())
