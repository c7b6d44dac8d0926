"""OrchestratorCaller: another run as a tool; nested calls count against the outer run's four."""

from __future__ import annotations

import asyncio

import pytest
import ray

from actors import Call, CallerFailed, Orchestrator, ToolReportedError, handoff, parallel_handoff
from actors import CompositeCaller, NestedRunUnavailable, OrchestratorCaller
from tests._models import Empty
from tests.actors._peak import SleepIn, SleepOut, new_counter, open_when_in_flight, sleepy_registry

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


@pytest.fixture(scope="module")
def runs(ray_module):
    """An inner run serving ``sleep``; an outer run serving its own ``sleep`` and the inner's as ``inner.sleep``."""
    inner = Orchestrator(Empty(), caller=sleepy_registry(replicas=4), name="nested-inner")
    outer = Orchestrator(Empty(), caller=CompositeCaller(sleepy_registry(replicas=4), OrchestratorCaller("nested-inner", prefix="inner.")))
    yield outer, inner
    asyncio.run(outer.close())
    asyncio.run(inner.close())


@pytest.fixture
def counter():
    name, actor = new_counter()
    yield name, actor
    ray.kill(actor)


async def test_a_call_is_handed_to_the_nested_runs_caller(runs, counter):
    outer, _ = runs
    name, actor = counter
    assert await handoff(outer, Call("inner.sleep", SleepIn(counter=name, seconds=0, tag=5)), SleepOut) == SleepOut(
        tag=5, node=ray.get_runtime_context().get_node_id())
    assert (await actor.report.remote())["finished"] == 1


async def test_the_nested_runs_tool_errors_stay_tool_errors(runs):
    outer, _ = runs
    with pytest.raises(ToolReportedError, match="nested run 'nested-inner': handoff 'sleep'.*invalid input for skill 'sleep'"):
        await handoff(outer, Call("inner.sleep", {"seconds": "x"}), SleepOut)


async def test_nested_calls_count_against_the_outer_runs_four(runs, counter):
    outer, _ = runs
    name, actor = counter
    calls = [Call("inner.sleep" if i % 2 else "sleep", SleepIn(counter=name, seconds=0.3, tag=i, gate=True)) for i in range(16)]
    batch = asyncio.ensure_future(parallel_handoff(outer, calls, SleepOut))
    await open_when_in_flight(actor, 4)
    results = await batch
    assert [r.output.tag for r in results] == list(range(16))
    report = await actor.report.remote()
    assert report["peak"] == 4 and report["finished"] == 16


async def test_the_nested_runs_own_cap_holds_while_it_also_serves_nested_calls(runs, counter):
    outer, inner = runs
    name, actor = counter
    nested = [Call("inner.sleep", SleepIn(counter=name, seconds=0.3, tag=i, gate=True)) for i in range(8)]
    own = [Call("sleep", SleepIn(counter=name, seconds=0.3, tag=i, gate=True)) for i in range(8)]
    both = asyncio.gather(parallel_handoff(outer, nested, SleepOut), parallel_handoff(inner, own, SleepOut))
    await open_when_in_flight(actor, 4)
    a, b = await both
    assert all(r.ok for r in a + b)
    assert (await actor.report.remote())["peak"] == 4  # every leaf ran under the inner run's four


async def test_without_a_prefix_the_tools_are_read_from_the_nested_run(runs):
    caller = OrchestratorCaller("nested-inner")
    assert caller.names() == ["sleep"] and caller.owns("sleep") and not caller.owns("inner.sleep")


async def test_a_nested_run_that_is_not_running_is_a_clear_failure():
    with pytest.raises(NestedRunUnavailable, match="nested run 'no-such-run' is not running"):
        OrchestratorCaller("no-such-run")
    outer = Orchestrator(Empty(), caller=OrchestratorCaller("no-such-run", prefix="x."))
    try:
        with pytest.raises(CallerFailed, match="NestedRunUnavailable: nested run 'no-such-run' is not running"):
            await handoff(outer, Call("x.sleep", {}), SleepOut)
    finally:
        await outer.close()
