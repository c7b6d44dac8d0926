"""Coordinator actors started ahead of their run: the run gets the very actor, one for all its coordinators."""

from __future__ import annotations

from typing import Any

import pytest
import ray

from actors import Orchestrator, Run, coordinators_started_ahead, create_coordinator_actor
from tests._waits import eventually
from coordinators import AgentState, ContextSnapshot, CoordinatorResult, TransitionBatch

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class Finisher:
    """One turn: write a marker and stop the run."""

    name = "finisher"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        return CoordinatorResult(TransitionBatch().update_state("seen", message), should_continue=False)


class Starter:
    """One turn: note the message and hand the run to the finisher."""

    name = "starter"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        return CoordinatorResult(TransitionBatch().update_state("started", message), handoff_to="finisher")


async def _alive(handle: Any, name: str | None = None) -> bool:
    try:
        await handle.process.remote(None, "ping", name)
    except ray.exceptions.RayActorError:
        return False
    return True


async def test_the_very_object_gets_its_actor_started_ahead_once_and_keeps_it() -> None:
    first, equal = Finisher(), Finisher()
    with coordinators_started_ahead([first]) as (started,):
        handed = create_coordinator_actor(first)
        again = create_coordinator_actor(first)
        other = create_coordinator_actor(equal)
        assert handed is started
        assert again is not started and other is not started  # asked again, or for an equal object: new actors
        result = await handed.process.remote(None, "hello")
        assert isinstance(result, CoordinatorResult)
    assert create_coordinator_actor(first) is not started  # outside the block: a new actor
    assert await _alive(started)  # taken: its taker owns it, the block's end leaves it alone
    for handle in (handed, again, other):
        ray.kill(handle)


async def test_one_actor_hosts_the_group_and_ends_with_the_block_when_no_run_took_it() -> None:
    starter, finisher = Starter(), Finisher()
    with coordinators_started_ahead([starter, finisher]) as (for_starter, for_finisher):
        assert for_starter is for_finisher  # one process for the run's coordinators
        assert create_coordinator_actor(starter) is not for_starter  # one of the group alone: its own actor
        result = await for_starter.process.remote(None, "hello", "starter")
        assert result.handoff_to == "finisher"
        with pytest.raises(ray.exceptions.RayTaskError, match="hosts finisher, starter; it was asked for None"):
            await for_starter.process.remote(None, "hello")  # two hosted: the turn must name one
    # ray.kill is asynchronous: a call sent right after it may still be served
    await eventually(lambda: _alive(for_starter, "starter"), lambda alive: not alive, "the group actor no run took ended")


async def test_a_run_of_several_coordinators_takes_the_group_actor_and_each_takes_its_turns() -> None:
    starter, finisher = Starter(), Finisher()
    orch = Orchestrator(AgentState())
    try:
        with coordinators_started_ahead([starter, finisher]) as (started, _):
            outcome = await Run(orch, [starter, finisher], first="starter").run("go")
        assert outcome.state["started"] == "go" and outcome.state["seen"] == "go" and outcome.turns == 2
        assert sorted((a["agent_id"], a["lifecycle"]) for a in await orch.agents()) == [
            ("coordinator:finisher", "closed"), ("coordinator:starter", "closed")]
        await eventually(lambda: _alive(started, "starter"), lambda alive: not alive, "the run killed its actor")
    finally:
        await orch.close()


async def test_a_run_inside_the_block_drives_records_and_ends_the_actor_started_ahead() -> None:
    finisher = Finisher()
    orch = Orchestrator(AgentState())
    try:
        with coordinators_started_ahead([finisher]) as (started,):
            outcome = await Run(orch, [finisher], first="finisher").run("go")
        assert outcome.status in ("complete", "stopped") and outcome.state["seen"] == "go"
        assert [(a["agent_id"], a["lifecycle"]) for a in await orch.agents()] == [("coordinator:finisher", "closed")]
        assert not await _alive(started)  # the run killed it, as it kills the actors it starts
    finally:
        await orch.close()


async def test_the_coordinator_process_imports_coordinators_not_the_actors_package() -> None:
    class ModulesSeen:  # local: pickled by value, so loading it imports no test module (which imports actors)
        name = "modules"

        async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
            import sys

            return CoordinatorResult(TransitionBatch().update_state("actors_imported", "actors" in sys.modules))

    handle = create_coordinator_actor(ModulesSeen())
    try:
        result = await handle.process.remote(None, "which modules?")
        (update,) = result.transitions
        assert update.data["value"] is False  # the actor's class came by value: no `import actors` in its process
    finally:
        ray.kill(handle)
