"""OpenAI Agents SDK agents on soloist: the same answers as a plain ``Runner.run`` against the
same server, each model request and tool call a journalled step; counted at the server (a
real socket) and in the tools' bodies, never by the runtime."""

from __future__ import annotations

from pathlib import Path

import pytest
from agents import Agent, Runner
from pydantic import BaseModel

from actors import Orchestrator
from actors.openai_agents import AgentJournal, DurableAgentConfigError, JournalMismatch, SoloistRunner
from coordinators import AgentState
from tests.openai_agents._agents import (MODEL_REQUESTS, QUIET, chat_model, factory, ledger_lines, script, scribe,
                                         triage_and_specialist)
from tests.openai_agents._server import CountingServer

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


async def _steps(runner: SoloistRunner, store: Path, run_id: str) -> list[tuple[str, str]]:
    watcher = Orchestrator.attach(runner.run_name(run_id), store=str(store))
    try:
        state = await watcher.snapshot()
    finally:
        await watcher.close()
    assert isinstance(state, AgentJournal)
    return [(step.key, step.name) for step in state.runs[f"{runner.name}/{run_id}"]]


async def test_an_agent_with_tools_answers_as_a_plain_runner_run_and_each_step_is_journalled(tmp_path: Path) -> None:
    store, ledger, plain_ledger = tmp_path / "runs.sqlite", tmp_path / "ledger.log", tmp_path / "plain.log"
    with CountingServer(script) as server:
        plain = await Runner.run(scribe(chat_model(server.base_url, None)), "plain", context=str(plain_ledger),
                                 run_config=QUIET)
        runner = SoloistRunner(store=str(store), model_factory=factory(server.base_url))
        result = await runner.run(scribe(), "durable", context=str(ledger), run_id="same-1", run_config=QUIET)
        assert result.final_output == plain.final_output == "done: 3; recorded first; 7; recorded second; 11"
        assert {step: server.count("durable", step) for step in range(MODEL_REQUESTS)} == {
            step: 1 for step in range(MODEL_REQUESTS)}
        assert ledger_lines(ledger) == ["tool record first", "tool record second"]

        # Run again with the same id: every step answered from the journal, nothing sent or run.
        again = await runner.run(scribe(), "durable", context=str(ledger), run_id="same-1", run_config=QUIET)
        assert again.final_output == result.final_output
        assert sum(n for (label, _), n in server.counts.items() if label == "durable") == MODEL_REQUESTS
        assert ledger_lines(ledger) == ["tool record first", "tool record second"]

    steps = await _steps(runner, store, "same-1")
    assert [key for key, _ in steps if key.startswith("model:")] == [f"model:{n}" for n in range(MODEL_REQUESTS)]
    assert sorted(name for key, name in steps if key.startswith("tool:")) == ["add", "add", "add", "record", "record"]
    assert result.raw_responses[0].usage.total_tokens == 18  # the usage the server reported, through the journal


async def test_a_handoff_between_two_agents_journals_each_agents_steps_in_the_same_run(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    with CountingServer(script) as server:
        triage, specialist = triage_and_specialist()
        runner = SoloistRunner(store=str(store), model_factory=factory(server.base_url))
        result = await runner.run(triage, "handoff-1", run_id="h1", run_config=QUIET)
        assert result.final_output == "specialist: 42"
        assert result.last_agent.name == "specialist"
        assert [server.count("handoff-1", step) for step in range(3)] == [1, 1, 1]
        assert triage.handoffs == [specialist] and specialist.model == "test-model", "the user's agents changed"

    assert await _steps(runner, store, "h1") == [
        ("model:0", "triage"), ("model:1", "specialist"), ("tool:1:handoff-1-add", "add"), ("model:2", "specialist")]


async def test_run_sync_answers_as_run(tmp_path: Path) -> None:
    import asyncio

    with CountingServer(script) as server:
        runner = SoloistRunner(model_factory=factory(server.base_url))  # no store: the run lives in memory
        result = await asyncio.to_thread(runner.run_sync, scribe(), "sync", context=str(tmp_path / "l.log"),
                                         run_config=QUIET)
        assert result.final_output == "done: 3; recorded first; 7; recorded second; 11"


async def test_a_run_taken_up_by_another_agent_is_refused_as_a_journal_mismatch(tmp_path: Path) -> None:
    store, ledger = tmp_path / "runs.sqlite", tmp_path / "ledger.log"
    with CountingServer(script) as server:
        runner = SoloistRunner(store=str(store), model_factory=factory(server.base_url))
        await runner.run(scribe(), "durable", context=str(ledger), run_id="m1", run_config=QUIET)
        triage, _ = triage_and_specialist()
        with pytest.raises(JournalMismatch, match=r"step 'model:0' of run 'openai-agents/m1' was committed as a request "
                                                  r"of agent 'scribe', but the resumed run asks it of agent 'triage'"):
            await runner.run(triage, "durable", context=str(ledger), run_id="m1", run_config=QUIET)
        assert sum(server.counts.values()) == MODEL_REQUESTS, "the mismatched run sent a request"


async def test_runs_live_in_an_orchestrator_the_user_gives_whose_state_must_be_a_journal(tmp_path: Path) -> None:
    with CountingServer(script) as server:
        own = Orchestrator(AgentJournal(), name="users-own-run")
        wrong = Orchestrator(AgentState(), name="not-a-journal")
        try:
            runner = SoloistRunner(orchestrator=own, model_factory=factory(server.base_url))
            result = await runner.run(scribe(), "own", context=str(tmp_path / "l.log"), run_id="a", run_config=QUIET)
            assert result.final_output == "done: 3; recorded first; 7; recorded second; 11"
            state = await own.snapshot()
            assert len([s for s in state.runs["openai-agents/a"] if s.kind == "model"]) == MODEL_REQUESTS
            with pytest.raises(DurableAgentConfigError, match=r"run 'not-a-journal' holds a state of type AgentState, "
                                                              r"not an AgentJournal"):
                await SoloistRunner(orchestrator=wrong, model_factory=factory(server.base_url)).run(
                    scribe(), "wrong", context=str(tmp_path / "l.log"), run_config=QUIET)
            assert server.count("wrong", 0) == 0, "a request was sent for a run that cannot hold its steps"
        finally:
            await own.close()
            await wrong.close()


class Forecast(BaseModel):
    city: str
    degrees: int


async def test_an_agent_with_an_output_type_has_its_schema_sent_and_its_answer_validated(tmp_path: Path) -> None:
    with CountingServer(script) as server:
        agent: Agent[None] = Agent(name="typed", instructions="Forecast.", model="test-model", output_type=Forecast)
        result = await SoloistRunner(model_factory=factory(server.base_url)).run(agent, "typed", run_config=QUIET)
        assert result.final_output == Forecast(city="Lyon", degrees=21)
        sent = server.bodies[0]["response_format"]
        assert sent["type"] == "json_schema" and set(sent["json_schema"]["schema"]["properties"]) == {"city", "degrees"}
