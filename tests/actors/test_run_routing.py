"""Run routing: coordinators as actors, CAS applies, the vetting coordinator before handoffs,
``handoff_to``, ``should_continue=False``, the turn limit, cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import ray

from actors import Orchestrator, Run, RunConfigError, RunEvent
from coordinators import AgentState, ContextSnapshot, CoordinatorResult, TransitionBatch
from tests._waits import HANG_GUARD_S
from tests.actors._peak import SleepIn, new_counter, sleepy_registry, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class Planner:
    """Turn 1: plan sleep calls (one of them forbidden) and hand off to safety."""

    name = "planner"

    def __init__(self, counter: str, seconds: float, calls: int = 3, gate: bool = False) -> None:
        self.counter, self.seconds, self.calls, self.gate = counter, seconds, calls, gate

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        batch = TransitionBatch().update_stage("exploring")
        for i in range(self.calls):
            batch.execute_tool("sleep", SleepIn(counter=self.counter, seconds=self.seconds, tag=i, gate=self.gate).model_dump())
        batch.execute_tool("sleep", {"counter": self.counter, "seconds": 0, "tag": 99, "forbidden": True})
        return CoordinatorResult(batch, reasoning=f"planned {self.calls + 1} calls", handoff_to="guard")


class Guard:
    """Blocks calls whose arguments say ``forbidden``; never stops the run."""

    name = "guard"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        batch = TransitionBatch()
        for call in snapshot.pending_tool_calls.values():
            if call.arguments.get("forbidden"):
                batch.tool_result(call.call_id, {"blocked": "forbidden"}, is_error=True)
        return CoordinatorResult(batch, reasoning=f"checked {len(snapshot.pending_tool_calls)}", handoff_to="judge")


class Judge:
    """Stops once every call has a tool message; otherwise asks the planner's results to be run."""

    name = "judge"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        tool_messages = [m for m in snapshot.messages if m.role == "tool"]
        if not snapshot.pending_tool_calls and tool_messages:
            batch = TransitionBatch().update_stage("complete").update_state("results", len(tool_messages))
            return CoordinatorResult(batch, reasoning="all results are in", should_continue=False)
        return CoordinatorResult.no_op(reasoning="waiting", handoff_to="judge")


class Looper:
    name = "looper"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        return CoordinatorResult.transitions_only(reasoning="again")


@pytest.fixture
def sleepy_run():
    name, counter = new_counter()
    orch = Orchestrator(AgentState(), caller=sleepy_registry(replicas=4))
    yield orch, name, counter
    asyncio.run(orch.close())
    ray.kill(counter)


def _loop(orch: Orchestrator, counter: str, seconds: float, gate: bool = False, **kw: Any) -> Run:
    coordinators = {"planner": Planner(counter, seconds, gate=gate), "guard": Guard(), "judge": Judge()}
    return Run(orch, coordinators, first="planner", fallback="judge", vetting="guard", **kw)


async def test_run_hands_off_safe_calls_applies_results_and_stops_with_the_reasoning(sleepy_run):
    orch, name, counter = sleepy_run
    events: list[RunEvent] = []
    outcome = await _loop(orch, name, 0.05, on_event=events.append).run("go")
    assert (outcome.status, outcome.reason) == ("complete", "all results are in")
    assert outcome.handoffs == 3 and outcome.handoff_errors == 0
    state = await orch.snapshot()
    assert state.pending_tool_calls == {}
    tool_messages = [m for m in state.messages if m.role == "tool"]
    assert len(tool_messages) == 4 and sum(m.metadata["is_error"] for m in tool_messages) == 1
    assert (await counter.report.remote())["finished"] == 3  # the forbidden call never ran
    assert [e.coordinator for e in events if e.kind == "turn"][:3] == ["planner", "guard", "judge"]
    assert [e.next for e in events if e.kind == "turn"][:2] == ["guard", "judge"]  # handoff_to honoured
    assert outcome.state["results"] == 4


async def test_run_stops_at_the_turn_limit(sleepy_run):
    orch, _, _ = sleepy_run
    outcome = await Run(orch, [Looper()], first="looper", max_turns=3).run("x")
    assert (outcome.status, outcome.turns) == ("max_turns", 3)
    assert "maximum of 3 turns" in outcome.reason


async def test_unknown_coordinator_names_are_rejected_up_front(sleepy_run):
    orch, _, _ = sleepy_run
    with pytest.raises(RunConfigError, match="first='missing' is not one of the coordinators"):
        Run(orch, {"looper": Looper()}, first="missing")


async def test_cancelling_a_run_cancels_in_flight_handoffs_and_leaves_no_pending_call(sleepy_run):
    orch, name, counter = sleepy_run
    task = asyncio.ensure_future(_loop(orch, name, 0.0, gate=True).run("go"))  # the gate never opens
    await wait_until(counter, "current", 3)
    task.cancel()
    outcome = await asyncio.wait_for(task, HANG_GUARD_S)
    assert outcome.status == "cancelled"
    state = await orch.snapshot()
    assert state.pending_tool_calls == {}
    assert all(m.metadata["is_error"] for m in state.messages if m.role == "tool")
    report = await wait_until(counter, "cancelled", 3)
    assert (report["cancelled"], report["finished"], report["current"]) == (3, 0, 0)


class _Stopper:
    name = "stopper"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        return CoordinatorResult(TransitionBatch().execute_tool("sleep", {"counter": "x", "seconds": 0}),
                                 reasoning="enough", should_continue=False, handoff_to="looper")


async def test_should_continue_false_ends_the_run_at_once_closing_its_pending_calls(sleepy_run):
    orch, _, counter = sleepy_run
    outcome = await Run(orch, [_Stopper(), Looper()], first="stopper").run("x")
    assert (outcome.status, outcome.reason, outcome.turns, outcome.handoffs) == ("stopped", "enough", 1, 0)
    assert outcome.pending_calls == 0
    assert (await counter.report.remote())["finished"] == 0  # the requested call never ran
