"""A driver that builds a ``SkillRegistry`` per run (a service, one run per request) ends up
with as many subagent processes as it started with: pools no open run uses retire.

Counted from Ray's table of named actors (each replica is ``soloist:sub:...``), before the
runs and after them; 40 runs in the regular suite, 200 under ``SOLOIST_RELIABILITY_FULL=1``.
"""

from __future__ import annotations

import time

import pytest
import ray
from pydantic import BaseModel

from actors import Call, Orchestrator, SkillRegistry, handoff
from tests._waits import eventually
from tests.reliability._support import scaled

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

#: Runs opened, handed off to once and closed, one after another, each with a fresh registry.
RUNS = scaled(40, 200)


class EchoIn(BaseModel):
    n: int


class EchoOut(BaseModel):
    n: int


class Empty(BaseModel):
    pass


def echo(inp: EchoIn) -> EchoOut:
    return EchoOut(n=inp.n)


def subagents() -> set[str]:
    """The live subagent replicas (one process each), from Ray's actor table."""
    return {actor["name"] for actor in ray.util.list_named_actors(all_namespaces=True)
            if actor["namespace"] == "soloist" and actor["name"].startswith("soloist:sub:")}


async def subagents_now() -> set[str]:
    return subagents()


async def test_a_fresh_registry_per_run_leaves_no_subagent_process_behind():
    before = subagents()
    peak = 0
    for i in range(RUNS):
        registry = SkillRegistry(replicas=8)  # the driver: default grace, a new registry per run
        registry.register("echo", echo)
        run = Orchestrator(Empty(), caller=registry)
        try:
            assert (await handoff(run, Call("echo", EchoIn(n=i)), EchoOut)).n == i
        finally:
            await run.close()
        peak = max(peak, len(subagents() - before))
    closed = time.monotonic()
    try:
        # Fewer than before is no leak: replicas of earlier tests retire meanwhile.
        after = await eventually(subagents_now, lambda now: now <= before, "the closed runs' replicas to retire",
                                 timeout=60)
    except AssertionError:
        left = sorted(subagents() - before)
        raise AssertionError(f"{len(left)} subagent processes left after {RUNS} runs were closed: {left[:10]}") from None
    print(f"\nsubagent processes before {len(before)}, at most {peak} more during {RUNS} runs, after {len(after)} "
          f"({time.monotonic() - closed:.1f}s after the last run closed)")
