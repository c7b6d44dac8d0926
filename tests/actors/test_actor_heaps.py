"""soloist's own actor processes keep their start-up objects out of the garbage collector.

Read from inside each process, by user code that runs there: an ``apply`` fn runs in the
process of its run (a host, or a dedicated actor), a skill body in its subagent replica.
"""

from __future__ import annotations

import asyncio
import gc

import pytest
from pydantic import BaseModel

from actors import Call, Orchestrator, SkillRegistry, handoff

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

# Ray, pydantic and soloist's modules alone are tens of thousands of objects.
_STARTUP_OBJECTS = 10_000


class Heap(BaseModel):
    frozen: int = 0
    """Objects in the collector's permanent generation of the process the fn ran in."""


def read_heap(state: Heap) -> None:
    state.frozen = gc.get_freeze_count()


class HeapIn(BaseModel):
    pass


class HeapOut(BaseModel):
    frozen: int


def _heap_skills() -> SkillRegistry:
    skills = SkillRegistry()

    @skills.skill("heap")
    def heap(inp: HeapIn) -> HeapOut:
        return HeapOut(frozen=gc.get_freeze_count())

    return skills


async def test_hosts_dedicated_runs_and_replicas_freeze_their_start_up_objects_and_the_driver_is_left_alone() -> None:
    driver_frozen = gc.get_freeze_count()
    skills = _heap_skills()
    hosted = Orchestrator(Heap(), caller=skills, name="heap-hosted")
    dedicated = await asyncio.to_thread(lambda: Orchestrator(Heap(), caller=skills, name="heap-dedicated", dedicated=True))
    try:
        for orch in (hosted, dedicated):
            await orch.apply(read_heap)
            assert (await orch.snapshot()).frozen > _STARTUP_OBJECTS, orch.name
        out = await handoff(hosted, Call("heap", HeapIn()), HeapOut)
        assert out.frozen > _STARTUP_OBJECTS  # the subagent replica's process
        assert gc.get_freeze_count() == driver_frozen  # a driver's heap is its own to manage
    finally:
        await asyncio.gather(hosted.close(), dedicated.close())
