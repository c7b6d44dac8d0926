"""The public Run API with user-written coordinators and skills (public names only)."""

from __future__ import annotations

import ast
import asyncio
import logging
from pathlib import Path

import pytest

import actors
import coordinators
from actors import (
    InterruptAlreadyAnswered,
    InterruptNotFound,
    InterruptNotOpen,
    Orchestrator,
    Run,
    RunConfigError,
    RunEvent,
    answer_interrupt,
    open_interrupts,
    read_record,
)
from coordinators import AgentState, ContextSnapshot, CoordinatorResult, TransitionBatch
from tests.actors.run_fixtures import Planner, Reviewer, Worker, counts, skill_registry, three

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

HERE = Path(__file__).resolve()


def test_the_run_tests_and_their_coordinators_import_only_public_names() -> None:
    public = {"actors": set(actors.__all__), "coordinators": set(coordinators.__all__)}
    for path in (HERE, HERE.with_name("run_fixtures.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("actors", "coordinators", "cluster"):
                assert node.module in public, f"{path.name} imports the module {node.module}"
                assert {a.name for a in node.names} <= public[node.module], f"{path.name}: private name from {node.module}"
            if isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] not in ("actors", "coordinators", "cluster") or a.name in public
                           for a in node.names)


async def test_a_user_defined_three_coordinator_run_hands_off_and_stops(tmp_path: Path) -> None:
    log = str(tmp_path / "effects.log")
    orch = Orchestrator(AgentState(), caller=skill_registry())
    events: list[RunEvent] = []
    try:
        run = Run(orch, three(log), first="planner", fallback="reviewer", on_event=events.append)
        outcome = await run.run("echo things")
        assert outcome.status == "complete", outcome.reason
        assert outcome.turns == 3 and outcome.handoffs == 2 and outcome.pending_calls == 0
        assert outcome.state["outputs"] == sorted(outcome.state["outputs"]) and len(outcome.state["outputs"]) == 2
        assert counts(log) == {"coordinator:planner": 1, "coordinator:worker": 1, "coordinator:reviewer": 1,
                               "skill:echo:a": 1, "skill:echo:b": 1}
        turns = [(e.coordinator, e.next, e.confidence) for e in events if e.kind == "turn"]
        assert turns == [("planner", "worker", 1.0), ("worker", "reviewer", 0.9), ("reviewer", None, 1.0)]
        assert [e.calls for e in events if e.kind == "handoffs" and e.calls] == [("echo", "echo")]
        assert events[-1].kind == "finished" and events[-1].status == "complete"
        assert events[0].reasoning == "plan for echo things"
        with pytest.raises(RunConfigError, match="already started"):
            await run.run("again")
        assert (await run.resume()).status == "complete"  # a finished run resumes to its outcome
        assert counts(log)["coordinator:planner"] == 1
    finally:
        await orch.close()


async def test_stream_yields_typed_events_and_sets_the_outcome(tmp_path: Path) -> None:
    orch = Orchestrator(AgentState(), caller=skill_registry())
    try:
        run = Run(orch, three(), first="planner")
        kinds = [event.kind async for event in run.stream("go")]
        assert kinds[0] == "turn" and kinds[-1] == "finished" and "handoffs" in kinds
        assert run.outcome is not None and run.outcome.status == "complete"
    finally:
        await orch.close()


class _Unsure:
    name = "unsure"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        return CoordinatorResult(transitions=TransitionBatch().update_state("guess", "wild"), reasoning="a guess",
                                 confidence=0.2, handoff_to="planner")


async def test_low_confidence_routes_to_the_fallback_without_applying_the_result(tmp_path: Path, caplog) -> None:
    log = str(tmp_path / "effects.log")
    orch = Orchestrator(AgentState(), caller=skill_registry())
    events: list[RunEvent] = []
    try:
        run = Run(orch, [_Unsure(), *three(log)], first="unsure", fallback="reviewer", confidence_threshold=0.5,
                  on_event=events.append)
        with caplog.at_level(logging.INFO, logger="soloist.run"):
            outcome = await run.run("go")
        decisions = [r for r in caplog.records if r.name == "soloist.run"]
        assert any("low_confidence turn 1 by unsure" in r.getMessage() and "(confidence 0.20" in r.getMessage()
                   and r.getMessage().endswith("a guess") for r in decisions)
        assert all(getattr(r, "component", None) == "run" for r in decisions)
        assert outcome.status == "complete"
        assert "guess" not in outcome.state
        low = [e for e in events if e.kind == "low_confidence"]
        assert [(e.coordinator, e.confidence, e.next) for e in low] == [("unsure", 0.2, "reviewer")]
        assert counts(log) == {"coordinator:reviewer": 1}
    finally:
        await orch.close()


async def test_every_turn_keeps_its_reasoning_and_confidence_in_the_state_of_the_version_that_took_it(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    orch = Orchestrator(AgentState(), caller=skill_registry(), name="noted", store=store)
    try:
        run = Run(orch, [_Unsure(), *three()], first="unsure", fallback="reviewer", confidence_threshold=0.5)
        assert (await run.run("go")).status == "complete"
        trail = read_record(await orch.snapshot()).trail
        assert [(n.turn, n.coordinator, n.reasoning, n.confidence, n.outcome) for n in trail] == [
            (1, "unsure", "a guess", 0.2, "fallback"), (2, "reviewer", "reviewed", 1.0, "applied")]
        for note in trail:  # read back from the journal, as `soloist history` and the runs page do
            assert read_record(await orch.state_at(note.version)).trail[-1] == note
            before = read_record(await orch.state_at(note.version - 1))
            assert before is None or note not in before.trail
    finally:
        await orch.close()


async def test_low_confidence_can_ask_for_approval_and_approving_applies_the_held_turn(tmp_path: Path) -> None:
    orch = Orchestrator(AgentState(), caller=skill_registry())
    try:
        run = Run(orch, [_Unsure(), *three()], first="unsure", fallback="reviewer", confidence_threshold=0.5,
                  low_confidence="approval")
        waiting = await run.run("go")
        assert waiting.status == "waiting"
        (interrupt,) = waiting.interrupts
        assert interrupt.kind == "turn" and interrupt.question["confidence"] == 0.2
        assert "guess" not in waiting.state
        await run.answer(interrupt.id, approve=True)
        done = await run.resume()
        assert done.status == "complete" and done.state["guess"] == "wild"
        assert done.turns == 4  # unsure (held, counted once), planner, worker, reviewer
    finally:
        await orch.close()


async def test_two_interrupts_open_at_once_are_answered_separately(tmp_path: Path) -> None:
    log = str(tmp_path / "effects.log")
    orch = Orchestrator(AgentState(), caller=skill_registry())
    try:
        run = Run(orch, three(log, approve="each"), first="planner", fallback="reviewer")
        waiting = await run.run("go")
        assert waiting.status == "waiting" and waiting.pending_calls == 2
        a, b = await open_interrupts(orch)
        assert (a.call_ids, b.call_ids) == (("call-a",), ("call-b",))
        assert a.question == {"call": "a", "why": "writes a"} and a.opened_version == b.opened_version
        version = await answer_interrupt(orch, a.id, approve=True)
        assert [i.id for i in await open_interrupts(orch)] == [b.id]
        still = await run.resume()  # b is still open: nothing runs
        assert still.status == "waiting" and counts(log).get("skill:echo:a") is None
        await answer_interrupt(orch, b.id, approve=False, reason="not b")
        assert await orch.version() == version + 1
        done = await run.resume()
        assert done.status == "complete"
        assert counts(log) == {"coordinator:planner": 1, "coordinator:worker": 1, "coordinator:reviewer": 1,
                               "skill:echo:a": 1}
        rejected = [m for m in (await orch.snapshot()).messages if m.tool_call_id == "call-b"]
        assert "rejected by a person: not b" in rejected[0].content
    finally:
        await orch.close()


async def test_bad_answers_are_refused_and_leave_the_state_byte_identical(tmp_path: Path) -> None:
    orch = Orchestrator(AgentState(), caller=skill_registry(), name="bad-answers-a")
    other = Orchestrator(AgentState(), caller=skill_registry(), name="bad-answers-b")
    try:
        await Run(orch, three(approve="one"), first="planner").run("go")
        await Run(other, three(approve="one"), first="planner").run("go")
        (mine,) = await open_interrupts(orch)
        (theirs,) = await open_interrupts(other)
        await answer_interrupt(orch, mine.id, approve=True)
        before = (await orch.snapshot()).model_dump_json()
        version = await orch.version()
        with pytest.raises(InterruptAlreadyAnswered, match="already approved"):
            await answer_interrupt(orch, mine.id, approve=False)
        with pytest.raises(InterruptNotFound, match="belongs to run 'bad-answers-b'"):
            await answer_interrupt(orch, theirs.id, approve=True)
        with pytest.raises(InterruptNotOpen, match="has no interrupt 'nope'"):
            await answer_interrupt(orch, "nope", approve=True)
        with pytest.raises(TypeError, match="True or False"):
            await answer_interrupt(orch, mine.id, approve="yes")  # type: ignore[arg-type]
        assert (await orch.snapshot()).model_dump_json() == before
        assert await orch.version() == version
    finally:
        await orch.close()
        await other.close()


async def test_a_whole_turn_held_for_approval_and_rejected_goes_to_the_fallback(tmp_path: Path) -> None:
    log = str(tmp_path / "effects.log")
    orch = Orchestrator(AgentState(), caller=skill_registry())
    try:
        run = Run(orch, three(log, approve="turn"), first="planner", fallback="reviewer")
        waiting = await run.run("go")
        (held,) = waiting.interrupts
        assert held.kind == "turn" and held.question == "apply this plan?" and waiting.pending_calls == 0
        await run.answer(held.id, approve=False, reason="no")
        done = await run.resume()
        assert done.status == "complete" and "plan" not in done.state
        assert counts(log) == {"coordinator:planner": 1, "coordinator:reviewer": 1}
    finally:
        await orch.close()


def test_a_bad_configuration_names_every_problem() -> None:
    orch = object.__new__(Orchestrator)
    with pytest.raises(RunConfigError) as caught:
        Run(orch, [Planner(), Worker(), Reviewer()], first="nobody", vetting="ghost", max_turns=0, confidence_threshold=2)
    text = str(caught.value)
    assert "first='nobody'" in text and "vetting='ghost'" in text and "max_turns" in text and "confidence_threshold" in text


async def test_resume_when_answered_wakes_on_the_answer_and_runs_each_step_once(tmp_path: Path) -> None:
    log = str(tmp_path / "effects.log")
    orch = Orchestrator(AgentState(), caller=skill_registry())
    try:
        run = Run(orch, three(log, approve="one"), first="planner", fallback="reviewer")
        assert (await run.run("go")).status == "waiting"
        waiting_at = await orch.version()
        with pytest.raises(TimeoutError):  # nothing answered: it gives up and resumes nothing
            await run.resume_when_answered(timeout=0.2)
        assert await orch.version() == waiting_at and len(await open_interrupts(orch)) == 1
        driver = asyncio.create_task(run.resume_when_answered())
        (interrupt,) = await open_interrupts(orch)
        await answer_interrupt(orch, interrupt.id, approve=True, reason="fine")
        assert (await driver).status == "complete"
        assert counts(log) == {"coordinator:planner": 1, "skill:echo:a": 1, "skill:echo:b": 1,
                               "coordinator:worker": 1, "coordinator:reviewer": 1}
    finally:
        await orch.close()


class Failing:
    """A coordinator whose turn raises."""

    name = "failing"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        raise ValueError(f"boom on {message}")


async def test_a_failing_coordinator_fails_the_run_with_its_own_error_and_its_record_keeps_it(tmp_path: Path) -> None:
    """The drive stops with the coordinator's error; its record stays ``error`` (moving it to
    ``idle`` as the drive stopped raised IllegalLifecycleTransition over the real error)."""
    orch = Orchestrator(AgentState(), store=str(tmp_path / "runs.sqlite"))
    try:
        with pytest.raises(ValueError, match="boom on go"):
            await Run(orch, [Failing()], first="failing").run("go")
        (record,) = [a for a in await orch.agents() if a["agent_id"].endswith("failing")]
        assert record["lifecycle"] == "error" and "boom on go" in record["last_error"]
    finally:
        await orch.close()
