"""Coordinator actors started ahead of their run: the run gets the very actors, the rest end."""

from __future__ import annotations

from typing import Any

import pytest
import ray

from actors import Orchestrator, Run, coordinators_started_ahead, create_coordinator_actor
from coordinators import AgentState, ContextSnapshot, CoordinatorResult, TransitionBatch

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class Finisher:
    """One turn: write a marker and stop the run."""

    name = "finisher"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        return CoordinatorResult(TransitionBatch().update_state("seen", message), should_continue=False)


async def _alive(handle: Any) -> bool:
    try:
        await handle.process.remote(None, "ping")
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


async def test_the_actors_no_run_took_end_with_the_block() -> None:
    taken, left = Finisher(), Finisher()
    with coordinators_started_ahead([taken, left]) as (for_taken, for_left):
        assert create_coordinator_actor(taken) is for_taken
    assert await _alive(for_taken)
    assert not await _alive(for_left)
    ray.kill(for_taken)


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
