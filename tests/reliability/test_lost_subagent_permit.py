"""A subagent that crashes gives its permit back as soon as Ray has judged it dead, not a TTL later.

On a three-node cluster, a skill body kills its own process (``os._exit``). Its requester sees
``SubagentLost`` and reports the replica to the semaphore, which checks it with Ray and frees
the dead process's lease. The scope's TTL is set far beyond the hang guard, so a permit that
comes back at all came back through that check, never through its TTL.

Everything is counted inside the bodies: ``PeakCounter`` for how many run at once (the
crashing body reports its end just before it exits, and its permit cannot come back before
its process is gone), and ``Timeline`` for when a body was about to die and when the body
waiting for its permit started (``time.monotonic``: one machine, one clock).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any

import pytest
import ray
from pydantic import BaseModel
from ray.cluster_utils import Cluster

from actors import Call, Orchestrator, SkillRegistry, SubagentLost, handoff, parallel_handoff
from cluster import ClusterSemaphore
from tests._waits import HANG_GUARD_S, eventually
from tests.actors._peak import NAMESPACE, PeakCounter, wait_until
from tests._models import Empty

pytestmark = [pytest.mark.reliability, pytest.mark.multinode, pytest.mark.timeout(900)]

TTL = 3 * HANG_GUARD_S
"""Far beyond every wait of these tests: a permit that comes back did not wait for its TTL."""

CRASHES = 10
"""Rounds of the crash test, five on each of its two runs: each round proves on its own that
the crashed replica's permit came back without its TTL (every one restarts that replica)."""


@ray.remote(num_cpus=0)
class Timeline:
    """When crashing bodies were about to die and waiting bodies started, by round; and the
    signal a crashing body waits for before it dies."""

    def __init__(self) -> None:
        self.marks: dict[tuple[str, int], tuple[float, int]] = {}
        self._changed = asyncio.Condition()
        self._die: dict[int, asyncio.Event] = {}

    async def mark(self, kind: str, round_: int, at: float, pid: int) -> None:
        self.marks[(kind, round_)] = (at, pid)
        async with self._changed:
            self._changed.notify_all()

    async def until(self, kind: str, round_: int) -> tuple[float, int]:
        async with self._changed:
            await self._changed.wait_for(lambda: (kind, round_) in self.marks)
            return self.marks[(kind, round_)]

    async def die_signal(self, round_: int) -> None:
        await self._die.setdefault(round_, asyncio.Event()).wait()

    def die(self, round_: int) -> None:
        self._die.setdefault(round_, asyncio.Event()).set()


class WorkIn(BaseModel):
    counter: str
    timeline: str
    round: int = 0
    gate: bool = False  # stay inside until the counter's gate opens
    seconds: float = 0.0
    waiter: bool = False  # report the start to the timeline (the body that waited for a permit)
    wait_for_signal: bool = False  # crash: only once the timeline says so


class WorkOut(BaseModel):
    pid: int


def _actor(name: str) -> Any:
    return ray.get_actor(name, namespace=NAMESPACE)


def crash_registry(suffix: str = "") -> SkillRegistry:
    """``slow`` (counted; gated or timed) and ``crash`` (counted; ends by killing its own process),
    each name followed by ``suffix`` (registries with different suffixes have pools of their own)."""
    skills = SkillRegistry(replicas=5)  # one more than the cap: a waiting call has a replica of its own

    @skills.skill(f"slow{suffix}")
    async def slow(inp: WorkIn) -> WorkOut:
        counter = _actor(inp.counter)
        await counter.enter.remote(ray.get_runtime_context().get_node_id())
        if inp.waiter:
            await _actor(inp.timeline).mark.remote("start", inp.round, time.monotonic(), os.getpid())
        if inp.gate:
            await counter.gate.remote()
        await asyncio.sleep(inp.seconds)
        await counter.exit.remote("finished")
        return WorkOut(pid=os.getpid())

    @skills.skill(f"crash{suffix}")
    async def crash(inp: WorkIn) -> WorkOut:
        counter = _actor(inp.counter)
        await counter.enter.remote(ray.get_runtime_context().get_node_id())
        if inp.wait_for_signal:
            await _actor(inp.timeline).die_signal.remote(inp.round)
        await _actor(inp.timeline).mark.remote("crash", inp.round, time.monotonic(), os.getpid())
        await counter.exit.remote("killed")  # the body ends here: nothing runs after it but the exit
        os._exit(1)

    return skills


class Crashes:
    """One run on a scope whose TTL no wait here reaches, its counter and its timeline; its
    skills' names end with ``suffix`` (see ``crash_registry``)."""

    def __init__(self, suffix: str = "") -> None:
        self.suffix = suffix
        self.counter_name = f"peak-{os.urandom(4).hex()}"
        self.counter = PeakCounter.options(name=self.counter_name, namespace=NAMESPACE).remote()
        self.timeline_name = f"timeline-{os.urandom(4).hex()}"
        self.timeline = Timeline.options(name=self.timeline_name, namespace=NAMESPACE).remote()
        self.semaphore = ClusterSemaphore(f"scope-{self.counter_name}", ttl_s=TTL)
        self.orch = Orchestrator(Empty(), caller=crash_registry(suffix), name=f"run-{self.counter_name}",
                                 semaphore_scope=self.semaphore.scope)

    def call(self, skill: str, **fields: Any) -> Call:
        return Call(f"{skill}{self.suffix}", WorkIn(counter=self.counter_name, timeline=self.timeline_name, **fields))

    async def close(self) -> None:
        await self.orch.close()
        for actor in (self.counter, self.timeline):
            ray.kill(actor)


@pytest.fixture(scope="module")
def cluster(multinode_cluster: Cluster) -> Cluster:
    return multinode_cluster


@pytest.fixture
async def run(cluster: Cluster):
    crashes = Crashes()
    yield crashes
    await crashes.close()


async def test_after_a_replica_crash_the_next_batch_reaches_four_bodies_and_never_more(run):
    first = [run.call("crash")] + [run.call("slow", seconds=1.0) for _ in range(5)]
    results = await asyncio.wait_for(parallel_handoff(run.orch, first, WorkOut), HANG_GUARD_S)
    assert isinstance(results[0].error, SubagentLost), results[0]
    # Besides the crashing call, at most the call queued behind it in the same replica is lost.
    assert all(r.ok or isinstance(r.error, SubagentLost) for r in results[1:]), results
    assert sum(not r.ok for r in results) <= 2, results
    first_report = await run.counter.report.remote()
    assert first_report["peak"] <= 4, first_report

    await run.counter.reset.remote()
    second = [run.call("slow", gate=True, seconds=0.3) for _ in range(8)]
    batch = asyncio.ensure_future(parallel_handoff(run.orch, second, WorkOut))
    # Four at once: the dead replica's permit is back, with a TTL far beyond this wait.
    await wait_until(run.counter, "current", 4)
    await run.counter.open.remote()
    again = await asyncio.wait_for(batch, HANG_GUARD_S)
    report = await run.counter.report.remote()
    print(f"\nafter a crash: first batch peak {first_report['peak']}, next batch peak {report['peak']} "
          f"on {len(report['nodes'])} nodes")
    assert all(r.ok for r in again), again
    assert report["peak"] == 4 and report["finished"] == 8, report


async def test_a_crashed_replicas_permit_returns_without_waiting_for_its_ttl(run):
    """Each round: four bodies hold the four permits (one of them about to crash), a fifth call
    waits for a permit; the crash, then the fifth body's start, are reported from inside.
    Two runs, each on a scope and pools of its own, go through their rounds at once (CRASHES
    rounds in all): while one waits for its crashed replica to start again, the other goes on."""
    delays: list[float] = []
    other = Crashes(suffix="-too")
    try:
        await asyncio.gather(_crash_rounds(run, range(0, CRASHES, 2), delays),
                             _crash_rounds(other, range(1, CRASHES, 2), delays))
    finally:
        await other.close()
    print(f"\ncrash -> permit back, over {CRASHES} crashes: median {statistics.median(delays):.2f}s, "
          f"max {max(delays):.2f}s (ttl {TTL:g}s)")
    assert len(delays) == CRASHES and all(d > 0 for d in delays)


async def _crash_rounds(run: Crashes, rounds: range, delays: list[float]) -> None:
    """The rounds ``rounds`` on ``run``, one after another; each one's delay from the crash
    to the waiting body's start goes to ``delays``."""
    for round_ in rounds:
        await run.counter.reset.remote()
        held = [run.call("crash", round=round_, wait_for_signal=True)]
        held += [run.call("slow", round=round_, gate=True) for _ in range(3)]
        batch = asyncio.ensure_future(parallel_handoff(run.orch, held, WorkOut))
        await wait_until(run.counter, "current", 4)
        waiter = asyncio.ensure_future(handoff(run.orch, run.call("slow", round=round_, waiter=True), WorkOut))
        await eventually(run.semaphore.statistics, lambda s: s.waiting >= 1, "the fifth call waiting for a permit")
        await run.timeline.die.remote(round_)
        crashed_at, _ = await run.timeline.until.remote("crash", round_)
        # The permit comes back, within the hang guard, far before the TTL: Ray's verdict, asked at once.
        started_at, _ = await asyncio.wait_for(run.timeline.until.remote("start", round_), HANG_GUARD_S)
        delays.append(started_at - crashed_at)
        await asyncio.wait_for(waiter, HANG_GUARD_S)
        await run.counter.open.remote()
        results = await asyncio.wait_for(batch, HANG_GUARD_S)
        assert isinstance(results[0].error, SubagentLost), results[0]
        assert all(r.ok for r in results[1:]), results
        report = await run.counter.report.remote()
        assert report["peak"] == 4, (round_, report)
