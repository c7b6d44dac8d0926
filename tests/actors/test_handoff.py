"""Handoffs: every behaviour of gridctl's Handoff/ParallelHandoff, plus the cluster-wide cap."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import pytest
import ray
from pydantic import BaseModel

from actors import (
    Call,
    CallerFailed,
    DecodingError,
    EmptySkill,
    HandoffInputError,
    NoToolCaller,
    Orchestrator,
    SkillRegistry,
    TextContent,
    ToolCallResult,
    ToolReportedError,
    handoff,
    parallel_handoff,
    pool_for,
)
from cluster import ClusterSemaphore, SemaphoreUnavailable
from tests._waits import eventually
from tests.actors._peak import SleepIn, SleepOut, gated_calls, new_counter, open_when_in_flight, sleepy_registry, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class AddIn(BaseModel):
    a: int
    b: int


class AddOut(BaseModel):
    sum: int


class Items(BaseModel):
    items: list[int] = []


skills = SkillRegistry(replicas=2)


@skills.skill("add")
def add(inp: AddIn) -> AddOut:
    return AddOut(sum=inp.a + inp.b)


@skills.skill("fail")
def fail(inp: AddIn) -> AddOut:
    raise ValueError(f"cannot add {inp.a} and {inp.b}")


class PidOut(BaseModel):
    pid: int


@skills.skill("pid")
def pid_of_replica(inp: Items) -> PidOut:
    return PidOut(pid=os.getpid())  # reported by the body, from the process it runs in


class FixedCaller:
    """A ToolCaller answering every call with one fixed result (or raising)."""

    def __init__(self, result: ToolCallResult | None = None, raises: Exception | None = None) -> None:
        self.result = result
        self.raises = raises

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        if self.raises is not None:
            raise self.raises
        assert self.result is not None
        return self.result


@pytest.fixture(scope="module")
def orch(ray_module):
    o = Orchestrator(Items(), caller=skills)
    yield o
    asyncio.run(o.close())


async def test_handoff_round_trips_a_typed_input_and_output(orch):
    assert await handoff(orch, Call("add", AddIn(a=2, b=3)), AddOut) == AddOut(sum=5)


async def test_handoff_accepts_a_dict_input(orch):
    assert (await handoff(orch, Call("add", {"a": 1, "b": 1}), AddOut)).sum == 2


async def test_handoff_treats_none_input_as_an_empty_object(orch):
    captured = Orchestrator(Items(), caller=FixedCaller(ToolCallResult(content=[TextContent(text='{"items": [1]}')])))
    try:
        assert await handoff(captured, Call("anything"), Items) == Items(items=[1])
        # the tool saw {} for None: an input model with required fields fails validation
        with pytest.raises(ToolReportedError, match="invalid input for skill 'add'"):
            await handoff(orch, Call("add", None), AddOut)
    finally:
        await captured.close()


async def test_handoff_rejects_an_empty_skill_name(orch):
    with pytest.raises(EmptySkill, match="empty skill name"):
        await handoff(orch, Call("", {}), AddOut)


async def test_handoff_without_a_caller_names_the_skill():
    bare = Orchestrator(Items())
    try:
        with pytest.raises(NoToolCaller, match="handoff 'add': the orchestrator has no ToolCaller"):
            await handoff(bare, Call("add", {"a": 1, "b": 2}), AddOut)
    finally:
        await bare.close()


def _named_actors() -> set[str]:
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}


async def _scope_live(scope: str) -> bool:
    """Whether a semaphore service holds a table for ``scope``."""
    try:
        await ClusterSemaphore.existing_async(scope)
    except SemaphoreUnavailable:
        return False
    return True


async def test_a_run_opens_its_semaphore_scope_at_its_first_handoff_and_drops_it_when_closed():
    run = Orchestrator(Items(), caller=skills)
    scope = run.handoff_settings().semaphore_scope
    try:
        assert not await _scope_live(scope)  # a run that never hands off opens no scope
        assert await handoff(run, Call("add", AddIn(a=1, b=1)), AddOut) == AddOut(sum=2)
        assert await _scope_live(scope)
        # Its table lives on one of the few service actors, not on an actor of its own.
        assert not [n for n in _named_actors() if n.startswith("soloist:sem:")]
        assert ClusterSemaphore.service_name(scope) in _named_actors()
    finally:
        await run.close()
    await eventually(lambda: _scope_live(scope), lambda live: not live, "the closed run's scope to be dropped")


async def test_handoff_rejects_input_that_is_not_an_object_or_not_json_clean(orch):
    with pytest.raises(HandoffInputError, match="input must be a pydantic model, a dict or None, got list"):
        await handoff(orch, Call("add", [1, 2]), AddOut)
    with pytest.raises(HandoffInputError, match="not JSON-clean"):
        await handoff(orch, Call("add", {"a": {1, 2}}), AddOut)


async def test_handoff_wraps_a_caller_failure_and_chains_its_cause():
    broken = Orchestrator(Items(), caller=FixedCaller(raises=ConnectionError("server went away")))
    try:
        with pytest.raises(CallerFailed, match="handoff 'remote': the caller failed: ConnectionError: server went away") as info:
            await handoff(broken, Call("remote", {}), Items)
        assert isinstance(info.value.__cause__, ConnectionError)
        assert info.value.skill == "remote"
    finally:
        await broken.close()


async def test_a_caller_raising_timeout_error_is_a_caller_failure_not_a_handoff_timeout():
    slow = Orchestrator(Items(), caller=FixedCaller(raises=TimeoutError("upstream took too long")))
    try:
        with pytest.raises(CallerFailed, match="the caller failed: TimeoutError: upstream took too long"):
            await handoff(slow, Call("remote", {}), Items, timeout=600)  # set, but never the subject: at load ~150 an instant failure took 83 s to return
    finally:
        await slow.close()


async def test_handoff_raises_the_tool_error_text_when_is_error_is_set(orch):
    with pytest.raises(ToolReportedError, match="handoff 'fail'.*cannot add 4 and 5"):
        await handoff(orch, Call("fail", AddIn(a=4, b=5)), AddOut)


async def test_handoff_reports_output_that_does_not_decode(orch):
    class Wrong(BaseModel):
        name: str

    with pytest.raises(DecodingError, match="handoff 'add': decoding output as Wrong failed"):
        await handoff(orch, Call("add", AddIn(a=1, b=2)), Wrong)


async def test_blank_or_null_output_decodes_to_the_empty_value():
    for text in ("", "null"):
        blank = Orchestrator(Items(), caller=FixedCaller(ToolCallResult(content=[TextContent(text=text)])))
        try:
            assert await handoff(blank, Call("noop"), Items) == Items()
            assert await handoff(blank, Call("noop"), list[int]) == []
            with pytest.raises(DecodingError, match="has no empty value"):
                await handoff(blank, Call("noop"), AddOut)
        finally:
            await blank.close()


async def test_unknown_skill_is_a_tool_error_listing_the_registered_ones(orch):
    with pytest.raises(ToolReportedError, match="unknown skill 'nope'; registered skills: add, fail"):
        await handoff(orch, Call("nope", {}), AddOut)


async def test_parallel_handoff_of_nothing_is_an_empty_list(orch):
    assert await parallel_handoff(orch, [], AddOut) == []


async def test_parallel_handoff_results_are_positional(orch):
    calls = [Call("add", AddIn(a=i, b=10)) for i in range(3)]
    results = await parallel_handoff(orch, calls, AddOut)
    assert [r.index for r in results] == [0, 1, 2]
    assert [r.output.sum for r in results] == [10, 11, 12]
    assert all(r.ok for r in results)


async def test_parallel_handoff_collects_per_item_errors_without_failing_the_batch(orch):
    calls = [Call("add", AddIn(a=1, b=1)), Call("fail", AddIn(a=1, b=1)), Call("", {}), Call("add", {"a": "x"})]
    results = await parallel_handoff(orch, calls, AddOut)
    assert results[0].output == AddOut(sum=2)
    assert isinstance(results[1].error, ToolReportedError)
    assert isinstance(results[2].error, EmptySkill)
    assert isinstance(results[3].error, ToolReportedError) and "invalid input" in str(results[3].error)


async def test_handoffs_one_after_another_go_to_one_replica_and_concurrent_ones_to_several(orch):
    await pool_for(orch.caller, "pid").start_all()  # calls go only to started replicas: start both
    # One after another: the replica that answered last answers again (its permit is warm).
    one_by_one = {(await handoff(orch, Call("pid"), PidOut)).pid for _ in range(6)}
    assert len(one_by_one) == 1
    # At once: each call goes to the replica with the fewest in flight, so both replicas work.
    together = {r.output.pid for r in await parallel_handoff(orch, [Call("pid")] * 6, PidOut)}
    assert len(together) == 2


@pytest.fixture
def sleepy():
    name, counter = new_counter()
    run = Orchestrator(Items(), caller=sleepy_registry(replicas=4))
    yield run, name, counter
    asyncio.run(run.close())
    ray.kill(counter)


async def test_a_hundred_calls_are_capped_at_exactly_four_in_flight(sleepy, caplog):
    run, name, counter = sleepy
    run.set_max_parallel(100)
    with caplog.at_level(logging.WARNING, logger="soloist.orchestrator"):
        batch = asyncio.ensure_future(parallel_handoff(run, gated_calls(name, 100, seconds=0.05), SleepOut))
        await open_when_in_flight(counter, 4)  # four bodies are inside at once, then all go on
        results = await batch
    assert [r.output.tag for r in results] == list(range(100))
    report = await counter.report.remote()
    assert report["peak"] == 4 and report["finished"] == 100
    assert any("clamped to 4" in rec.getMessage() for rec in caplog.records)


async def test_cap_two_keeps_two_in_flight(sleepy):
    run, name, counter = sleepy
    run.set_max_parallel(2)
    batch = asyncio.ensure_future(parallel_handoff(run, gated_calls(name, 12, seconds=0.1), SleepOut))
    await open_when_in_flight(counter, 2)
    assert all(r.ok for r in await batch)
    assert (await counter.report.remote())["peak"] == 2


async def test_cancelling_a_batch_cancels_subagent_work_and_frees_every_permit(sleepy):
    run, name, counter = sleepy
    batch = asyncio.ensure_future(parallel_handoff(run, gated_calls(name, 8), SleepOut))  # the gate never opens
    await wait_until(counter, "current", 4)
    batch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await batch
    report = await wait_until(counter, "cancelled", 4)
    assert report == {**report, "current": 0, "cancelled": 4, "finished": 0}  # the four waiting never started
    replicas = pool_for(run.caller, "sleep").handles()
    await eventually(lambda: asyncio.gather(*(h.open_lanes.remote() for h in replicas)), lambda open_: not any(open_),
                     "the cancelled calls to leave their lanes")
    await counter.reset.remote()
    again = asyncio.ensure_future(parallel_handoff(run, gated_calls(name, 8, seconds=0.3), SleepOut))
    await open_when_in_flight(counter, 4)  # no permit leaked: four bodies are inside at once again
    assert all(r.ok for r in await again)
    assert (await counter.report.remote())["peak"] == 4


async def test_a_per_call_timeout_fails_only_that_item(sleepy):
    run, name, counter = sleepy
    calls = [Call("sleep", SleepIn(counter=name, seconds=0.05, tag=1)), Call("sleep", SleepIn(counter=name, seconds=30), timeout=0.5)]
    results = await parallel_handoff(run, calls, SleepOut)
    assert results[0].output.tag == 1
    assert isinstance(results[1].error, TimeoutError) and "'sleep' timed out after 0.5s" in str(results[1].error)


@ray.remote(num_cpus=0)
def _hand_off_from_another_process(run: Orchestrator, counter: str, n: int) -> int:
    async def go() -> int:
        results = await parallel_handoff(run, gated_calls(counter, n, seconds=0.1), SleepOut)
        return sum(r.ok for r in results)

    return asyncio.run(go())


async def test_the_cap_holds_across_processes_handing_off_for_one_orchestrator(sleepy):
    run, name, counter = sleepy
    everything = asyncio.gather(
        _hand_off_from_another_process.remote(run, name, 20),
        _hand_off_from_another_process.remote(run, name, 20),
        parallel_handoff(run, gated_calls(name, 20, seconds=0.1), SleepOut),
    )
    await open_when_in_flight(counter, 4)
    ok = await everything
    assert ok[:2] == [20, 20] and all(r.ok for r in ok[2])
    assert (await counter.report.remote())["peak"] == 4


async def test_runs_sharing_a_named_semaphore_scope_share_one_budget_of_four():
    name, counter = new_counter()
    scope = f"shared-api-{name}"
    runs = [Orchestrator(Items(), caller=sleepy_registry(replicas=4), semaphore_scope=scope) for _ in range(3)]
    try:
        everything = asyncio.gather(*(parallel_handoff(run, gated_calls(name, 12, seconds=0.1), SleepOut) for run in runs))
        await open_when_in_flight(counter, 4)
        batches = await everything
        assert all(r.ok for batch in batches for r in batch)
        assert (await counter.report.remote())["peak"] == 4
    finally:
        for run in runs:
            await run.close()
        ray.kill(counter)


async def test_an_item_waiting_behind_a_long_one_moves_to_a_lane_that_went_idle(sleepy):
    run, name, counter = sleepy
    # Five items at cap 4: the fifth is sent to the first item's replica to wait behind it.
    # That first item stays at the gate, so the fifth can only finish if it was moved to a
    # lane whose item had ended.
    calls = [Call("sleep", SleepIn(counter=name, seconds=0.01, tag=0, gate=True))]
    calls += [Call("sleep", SleepIn(counter=name, seconds=0.01, tag=tag)) for tag in range(1, 5)]
    batch = asyncio.ensure_future(parallel_handoff(run, calls, SleepOut))
    report = await wait_until(counter, "finished", 4)
    assert report["current"] == 1 and report["entered"] == 5, "the gated item is the only one inside"
    await counter.open.remote()
    results = await batch
    assert [r.output.tag for r in results] == list(range(5))
    report = await counter.report.remote()
    assert report["entered"] == 5, "an item ran twice"
    assert report["finished"] == 5
    replicas = pool_for(run.caller, "sleep").handles()
    assert await asyncio.gather(*(h.open_lanes.remote() for h in replicas)) == [0] * len(replicas)


async def test_items_of_mixed_lengths_each_run_once_and_never_more_than_four_at_once(sleepy):
    run, name, counter = sleepy
    lengths = [0.0, 0.2, 0.01, 0.05] * 10  # items end out of order, so lanes go idle and take waiting items
    calls = [Call("sleep", SleepIn(counter=name, seconds=s, tag=tag)) for tag, s in enumerate(lengths)]
    results = await parallel_handoff(run, calls, SleepOut)
    assert [r.error for r in results if not r.ok] == []
    assert [r.output.tag for r in results] == list(range(40))
    report = await counter.report.remote()
    assert report["entered"] == 40, "an item ran twice"
    assert report["finished"] == 40
    assert report["peak"] <= 4
