"""A pydantic-ai agent on soloist: the same answers as the plain agent, each step journalled.

The model's function appends a ledger line from inside the model subagent's replica for each
request it really receives, and the side-effect tool one from its body: the counts are taken
from outside the runtime.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from actors import Orchestrator
from actors.pydantic_ai import AgentJournal, DurableAgentConfigError, SoloistAgent
from coordinators import AgentState
from tests.pydantic_ai._agents import MODEL_REQUESTS, build_agent, ledger_lines

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


async def _plain_output(tmp_path: Path) -> str:
    plain_ledger = tmp_path / "plain.log"
    result = await build_agent(plain_ledger).run("go", deps=str(plain_ledger))
    return result.output


async def test_a_durable_agent_with_two_tools_answers_as_the_plain_agent(tmp_path: Path) -> None:
    expected = await _plain_output(tmp_path)
    ledger = tmp_path / "ledger.log"
    durable = SoloistAgent(build_agent(ledger), store=str(tmp_path / "runs.sqlite"))
    # run_sync, as a user calls it from synchronous code (here on a thread: the test runs on a loop)
    result = await asyncio.to_thread(durable.run_sync, "go", deps=str(ledger), run_id="same-1")
    assert result.output == expected
    assert result.run_id == "same-1"
    seen = Counter(ledger_lines(ledger))
    assert seen == {**{f"model {n}": 1 for n in range(MODEL_REQUESTS)}, "tool record first": 1, "tool record second": 1}

    # Every request and every tool call is a committed step of the run, in its journal.
    watcher = Orchestrator.attach(durable.run_name("same-1"), store=str(tmp_path / "runs.sqlite"))
    try:
        state = await watcher.snapshot()
    finally:
        await watcher.close()
    assert isinstance(state, AgentJournal)
    steps = state.runs["scribe/same-1"]
    assert [s.key for s in steps if s.kind == "model"] == [f"model:{n}" for n in range(MODEL_REQUESTS)]
    assert sorted(s.name for s in steps if s.kind == "tool") == ["add", "add", "add", "record", "record"]


async def test_running_a_finished_run_again_answers_every_step_from_the_journal(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.log"
    durable = SoloistAgent(build_agent(ledger), store=str(tmp_path / "runs.sqlite"))
    first = await durable.run("go", deps=str(ledger), run_id="again-1")
    before = ledger_lines(ledger)
    again = await durable.run("go", deps=str(ledger), run_id="again-1")
    assert again.output == first.output
    assert ledger_lines(ledger) == before, "a committed model request or tool body ran again"
    assert [m.kind for m in again.all_messages()] == [m.kind for m in first.all_messages()]


async def test_iter_walks_the_same_nodes_as_the_plain_agent(tmp_path: Path) -> None:
    plain_ledger, ledger = tmp_path / "plain.log", tmp_path / "ledger.log"
    async with build_agent(plain_ledger).iter("go", deps=str(plain_ledger)) as plain_run:
        plain_nodes = [type(node).__name__ async for node in plain_run]
    durable = SoloistAgent(build_agent(ledger))  # no store: the run lives in memory
    async with durable.iter("go", deps=str(ledger)) as agent_run:
        nodes = [type(node).__name__ async for node in agent_run]
    assert nodes == plain_nodes
    assert agent_run.result is not None and plain_run.result is not None
    assert agent_run.result.output == plain_run.result.output


async def test_runs_live_in_an_orchestrator_the_user_gives(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.log"
    orch = Orchestrator(AgentJournal(), name="users-own-run", store=str(tmp_path / "runs.sqlite"))
    try:
        durable = SoloistAgent(build_agent(ledger), orchestrator=orch)
        result = await durable.run("go", deps=str(ledger), run_id="a")
        assert result.output == await _plain_output(tmp_path)
        state = await orch.snapshot()
        assert len([s for s in state.runs["scribe/a"] if s.kind == "model"]) == MODEL_REQUESTS
    finally:
        await orch.close()


async def test_an_orchestrator_whose_state_is_not_a_journal_is_refused_by_name(tmp_path: Path) -> None:
    orch = Orchestrator(AgentState(), name="not-a-journal")
    try:
        durable = SoloistAgent(build_agent(tmp_path / "ledger.log"), orchestrator=orch)
        with pytest.raises(DurableAgentConfigError, match=r"run 'not-a-journal' holds a state of type AgentState, not an AgentJournal"):
            await durable.run("go", deps=str(tmp_path / "ledger.log"))
    finally:
        await orch.close()
    assert ledger_lines(tmp_path / "ledger.log") == [], "nothing was requested"


async def test_a_model_given_at_run_time_is_refused(tmp_path: Path) -> None:
    durable = SoloistAgent(build_agent(tmp_path / "ledger.log"))
    with pytest.raises(DurableAgentConfigError, match="a model cannot be given at run time"):
        await durable.run("go", deps="", model="test")
