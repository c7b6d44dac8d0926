"""A driver whose run goes through every soloist path that runs inside an async actor.

``python _event_loop_driver.py WORKDIR``: starts its own embedded Ray (the test points
``RAY_TMPDIR`` at a directory of its own, so the session's worker logs are found there), then

- a durable orchestrator (SQLite store in WORKDIR) takes ``apply`` writes and hands off a
  plain synchronous skill, under a semaphore scope whose TTL no wait here reaches;
- a call crashes its subagent (``os._exit``): the driver sees ``SubagentLost``, reports the
  replica, and waits until the semaphore's probe (Ray's verdict) has freed the dead
  process's lease, which nothing else frees within that TTL;
- a skill body holds a lease of a short-TTL scope from inside its subagent until a renewal
  of the heartbeat thread has confirmed it;
- a nested run: a run whose caller is another run (``OrchestratorCaller``), so a subagent
  attaches to the inner run and joins its semaphore from its own process;

and prints ``DONE <outer version> <expired leases>`` once every run is closed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid

from pydantic import BaseModel

from actors import (
    Call,
    Orchestrator,
    OrchestratorCaller,
    SkillRegistry,
    SubagentLost,
    handoff,
    parallel_handoff,
)
from cluster import ClusterSemaphore, connect
from tests._waits import HANG_GUARD_S, eventually

LONG_TTL = 3 * HANG_GUARD_S
"""The outer scope's TTL: a lease freed within the hang guard was freed by the probe."""

SHORT_TTL = 4.5
"""The renewal scope's TTL: the heartbeat renews every 1.5 s, each renewal given 1.5 s to
come back (a busy machine's round trip fits)."""


class Tally(BaseModel):
    total: int = 0


class Pair(BaseModel):
    a: int
    b: int


class Sum(BaseModel):
    value: int


class Renewal(BaseModel):
    scope: str
    ttl: float


class Renewed(BaseModel):
    waited: float


def skill_registry() -> SkillRegistry:
    skills = SkillRegistry(replicas=2)

    @skills.skill("add")
    def add(inp: Pair) -> Sum:  # a plain synchronous skill: the case
        return Sum(value=inp.a + inp.b)

    @skills.skill("crash")
    def crash(inp: Pair) -> Sum:
        os._exit(1)

    @skills.skill("renewed")
    async def renewed(inp: Renewal) -> Renewed:
        """Hold a lease until this process's heartbeat has renewed it: past one TTL from the
        grant, ``holds`` is true only after a renewal the semaphore confirmed."""
        semaphore = ClusterSemaphore(inp.scope, ttl_s=inp.ttl)
        lease = await semaphore.acquire(limit=1)
        granted = time.monotonic()
        deadline = granted + HANG_GUARD_S
        try:
            while not (time.monotonic() > granted + inp.ttl and semaphore.holds(lease)):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"lease {lease.lease_id} was not renewed within {HANG_GUARD_S:g}s")
                await asyncio.sleep(0.05)
        finally:
            await semaphore.release(lease)
        return Renewed(waited=time.monotonic() - granted)

    return skills


async def main(workdir: str) -> None:
    connect(namespace="soloist-event-loops")
    tag = uuid.uuid4().hex[:8]
    skills = skill_registry()

    # A durable run with apply writes and handoffs under a scope whose TTL nothing reaches.
    scope = ClusterSemaphore(f"loops-{tag}", ttl_s=LONG_TTL)
    outer = Orchestrator(Tally(), caller=skills, name=f"loops-outer-{tag}", store=os.path.join(workdir, "runs.db"),
                         semaphore_scope=scope.scope)
    await outer.apply(lambda state: setattr(state, "total", 1))
    added = await handoff(outer, Call("add", Pair(a=2, b=3)), Sum)
    await outer.apply(lambda state: setattr(state, "total", state.total + added.value))

    # A crashed subagent: its lease comes back only through the semaphore's probe.
    try:
        await handoff(outer, Call("crash", Pair(a=0, b=0)), Sum)
    except SubagentLost as exc:
        print(f"LOST {exc}", flush=True)
    else:
        raise AssertionError("the crashing skill returned")
    stats = await eventually(scope.statistics, lambda s: s.expired_total >= 1,
                             "the crashed subagent's lease freed by the semaphore's probe")
    results = await parallel_handoff(outer, [Call("add", Pair(a=i, b=i)) for i in range(4)], Sum)
    assert all(r.ok for r in results), results

    # The heartbeat renews a lease held inside a subagent (an async actor's process).
    ClusterSemaphore(f"loops-renew-{tag}", ttl_s=SHORT_TTL)
    renewal = await handoff(outer, Call("renewed", Renewal(scope=f"loops-renew-{tag}", ttl=SHORT_TTL)), Renewed)
    print(f"RENEWED after {renewal.waited:.2f}s", flush=True)

    # A nested run: the outer run's subagent attaches to the inner run and joins its scope.
    inner = Orchestrator(Tally(), caller=skill_registry(), name=f"loops-inner-{tag}")
    nesting = Orchestrator(Tally(), caller=OrchestratorCaller(inner.name, prefix="inner."), name=f"loops-nest-{tag}")
    nested = await handoff(nesting, Call("inner.add", {"a": 20, "b": 22}), Sum)
    assert nested.value == 42, nested

    version = await outer.version()
    for run in (nesting, inner, outer):
        await run.close()
    print(f"DONE {version} {stats.expired_total}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
