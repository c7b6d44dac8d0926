"""A driver that builds a ``SkillRegistry`` per run (a service, one run per request) ends up
with as many subagent processes as it started with: pools no open run uses retire.

The issue's driver, with the default settings: runs, each with a fresh
``SkillRegistry(replicas=8)``, opened, handed off to once and closed, served four at a time
(a service handling concurrent requests): 40 in the suite, the issue's 200 under
``SOLOIST_RELIABILITY_FULL=1``. Processes are
counted in Ray's actor table (the GCS's table of live named actors: every subagent replica
is the named actor ``soloist:sub:{key}:{skill}:{slot}`` of class ``SubagentActor``; Ray's
``ray.util.state.list_actors`` needs the dashboard, which this test setup does not start)
before the runs, after each run, and until the count is back where it started.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import ray
from pydantic import BaseModel

from actors import Call, Orchestrator, SkillRegistry, handoff
from tests._waits import eventually
from tests.reliability._support import scaled
from tests._models import Empty

pytestmark = [pytest.mark.ray, pytest.mark.reliability, pytest.mark.usefixtures("ray_session")]

#: Runs opened, handed off to once and closed, each with a fresh registry, ``AT_ONCE`` at a time:
#: each run starts its own actor processes (about 1 s a run on this 2-core machine), so the
#: suite runs 40 and ``SOLOIST_RELIABILITY_FULL=1`` the issue's 200.
RUNS, AT_ONCE = scaled(40, 200), 4
#: Where a replica is counted: the namespace and name prefix of every subagent replica.
REPLICA_NAMESPACE, REPLICA_PREFIX = "soloist", "soloist:sub:"


class EchoIn(BaseModel):
    n: int


class EchoOut(BaseModel):
    n: int


def echo(inp: EchoIn) -> EchoOut:
    """A plain synchronous skill."""
    return EchoOut(n=inp.n)


def subagents() -> set[str]:
    """The live subagent replicas (one process each), from Ray's actor table."""
    return {actor["name"] for actor in ray.util.list_named_actors(all_namespaces=True)
            if actor["namespace"] == REPLICA_NAMESPACE and actor["name"].startswith(REPLICA_PREFIX)}


async def subagents_now() -> set[str]:
    return subagents()


async def test_many_runs_each_with_a_fresh_registry_leave_no_subagent_process_behind():
    before = subagents()
    started = time.monotonic()
    peak = len(before)

    async def one_run(i: int) -> None:
        registry = SkillRegistry(replicas=8)  # the driver: default settings, a new registry per run
        registry.register("echo", echo)
        run = Orchestrator(Empty(), caller=registry)
        try:
            assert (await handoff(run, Call("echo", EchoIn(n=i)), EchoOut)).n == i
        finally:
            await run.close()

    for first in range(0, RUNS, AT_ONCE):
        await asyncio.gather(*(one_run(i) for i in range(first, min(first + AT_ONCE, RUNS))))
        peak = max(peak, len(subagents() | before))
    closed = time.monotonic()
    at_close = subagents()
    try:
        # Back where it started: no replica but those alive before (which may retire too).
        after = await eventually(subagents_now, lambda now: now <= before, "the closed runs' replicas to retire",
                                 timeout=60)
    except AssertionError:
        left = sorted(subagents() - before)
        raise AssertionError(f"{len(left)} subagent processes left 60s after {RUNS} runs were closed "
                             f"(before {len(before)}, peak {peak}): {left[:10]}") from None
    back = time.monotonic()
    print(f"\nsubagent processes: before {len(before)}, peak {peak} during {RUNS} runs "
          f"({closed - started:.1f}s), {len(at_close)} when the last run closed, after {len(after)}, "
          f"back {back - closed:.1f}s after the last run closed")
