"""The cap of four holds whatever is cancelled, timed out, paused or killed.

Every number here is counted by the skill bodies themselves (``_cap_support.Intervals``:
each body reports its start and end from its own process; the peak is the largest overlap
of those intervals). Leases use a short TTL (1 s) so pauses "longer than the TTL" are short.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest
import ray

from actors import Call, Orchestrator, PoolPolicy, SubagentLost, parallel_handoff, pool_for
from cluster import ClusterSemaphore
from tests.actors._peak import replicas_answer
from tests.reliability._cap_support import (Gate, Intervals, WorkIn, WorkOut, cap_registry, new_named, read_line,
                                            start_driver, wait_for)
from tests._models import Empty

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(600), pytest.mark.usefixtures("ray_session")]

TTL = 1.0


class Cap:
    """One run on a short-TTL scope, its intervals counter and a gate."""

    def __init__(self, policy: PoolPolicy | None = None) -> None:
        self.intervals_name, self.intervals = new_named(Intervals)
        self.gate_name, self.gate = new_named(Gate)
        self.semaphore = ClusterSemaphore(f"scope-{self.intervals_name}", ttl_s=TTL)
        registry = cap_registry(policy=policy) if policy else cap_registry(replicas=4)
        self.orch = Orchestrator(Empty(), caller=registry, name=f"run-{self.intervals_name}",
                                 semaphore_scope=self.semaphore.scope)

    def calls(self, skill: str, n: int, *, tag: str = "", gated: bool = False, seconds: float = 0.05,
              timeout: float | None = None) -> list[Call]:
        inp = WorkIn(intervals=self.intervals_name, tag=tag, gate=self.gate_name if gated else "", seconds=seconds)
        return [Call(skill, inp, timeout=timeout) for _ in range(n)]

    async def report(self) -> dict[str, Any]:
        return await self.intervals.report.remote()

    async def running(self, n: int) -> None:
        await wait_for(lambda: self.at_least("running", n), f"{n} bodies running")

    async def parked(self, n: int) -> None:
        last: list[Any] = []

        async def check() -> bool:
            stats = await self.semaphore.statistics()
            last[:] = [stats, await self.report()]
            return stats.waiting >= n
        try:
            await wait_for(check, f"{n} requests parked at the semaphore")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last seen {last}") from None

    async def at_least(self, key: str, n: int) -> bool:
        return (await self.report())[key] >= n

    async def close(self) -> None:
        await self.orch.close()
        for actor in (self.intervals, self.gate):
            ray.kill(actor)


@pytest.fixture
async def cap():
    c = Cap()
    yield c
    await c.close()


@pytest.fixture
async def spread_cap():
    """A run whose four replicas all answer before the test starts: a batch of four then has
    one body in each (a pool sends calls to the replicas started so far, so while some start
    one replica may hold several)."""
    c = Cap(PoolPolicy(min_replicas=4, max_replicas=4, target_ongoing_calls=1.0))
    await parallel_handoff(c.orch, c.calls("work", 1), WorkOut)  # starts the pool and its min replicas
    await wait_for(lambda: _all_answer(c), "the pool's four replicas to answer")
    ray.kill(c.intervals)
    c.intervals_name, c.intervals = new_named(Intervals)  # the test counts from zero
    yield c
    await c.close()


async def _all_answer(cap: Cap) -> bool:
    handles = pool_for(cap.orch.caller, "work").handles()
    if len(handles) < 4:
        return False
    await replicas_answer(handles)
    return True


def _admitted_as_old_ones_end(new: list[tuple[float, float]], old: list[tuple[float, float]]) -> bool:
    """While the old bodies hold every permit, the i-th new body starts only after the i-th old
    body has ended: each new body takes the permit one old body gave back (never sooner)."""
    starts = sorted(s for s, _ in new)
    ends = sorted(e for _, e in old)
    return len(ends) >= len(starts) and all(s >= e for s, e in zip(starts, ends))


@pytest.mark.parametrize("skill", ["work", "work_sync"])
async def test_sync_and_async_skills_never_run_more_than_four_bodies(cap, skill):
    batch = asyncio.ensure_future(parallel_handoff(cap.orch, cap.calls(skill, 16, gated=True), WorkOut))
    await cap.running(4)  # the first four are held open together; then all sixteen go through
    await cap.gate.open.remote()
    results = await batch
    report = await cap.report()
    print(f"\n{skill}: peak {report['peak']} of {report['finished']} bodies")
    assert all(r.ok for r in results) and report["finished"] == 16
    assert report["peak"] == 4


@pytest.mark.parametrize("skill", ["work", "work_sync"])
async def test_a_batch_cancelled_mid_way_then_a_new_batch_never_exceeds_four(cap, skill):
    batch = asyncio.ensure_future(parallel_handoff(cap.orch, cap.calls(skill, 8, tag="old", gated=True), WorkOut))
    await cap.running(4)
    batch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await batch
    fresh = asyncio.ensure_future(parallel_handoff(cap.orch, cap.calls(skill, 4, tag="new"), WorkOut))
    if skill == "work_sync":
        await cap.parked(4)  # the old sync bodies still run and still hold the four permits
        assert (await cap.report())["running_tags"] == ["old"] * 4
        await cap.gate.open.remote()
    results = await fresh
    report = await cap.report()
    print(f"\n{skill}: cancel then new batch: peak {report['peak']}")
    assert all(r.ok for r in results)
    assert report["peak"] == 4, (report, await cap.intervals.dump.remote())
    if skill == "work":
        # Async bodies really stopped: none of the old batch finished and none still runs. At
        # least the four that ran were cancelled (a parked request of the old batch may have
        # been granted before its own cancellation arrived, and was cancelled in turn).
        assert report["by_tag"].get("old", 0) == 0 and report["running"] == 0, (report, await cap.intervals.dump.remote())
        assert report["cancelled"] >= 4, (report, await cap.intervals.dump.remote())
    else:
        assert _admitted_as_old_ones_end(await cap.intervals.spans.remote("new"), await cap.intervals.spans.remote("old"))


@pytest.mark.parametrize("skill", ["work", "work_sync"])
async def test_per_call_timeouts_then_a_new_batch_never_exceeds_four(cap, skill):
    timed = await parallel_handoff(cap.orch, cap.calls(skill, 4, tag="old", gated=True, timeout=1.0), WorkOut)
    assert all(isinstance(r.error, TimeoutError) for r in timed)
    expected = "the subagent's work was cancelled" if skill == "work" else "cannot be interrupted"
    assert all(expected in str(r.error) for r in timed), [str(r.error) for r in timed]
    # The async bodies were stopped: the new ones are held open together at the gate. The
    # sync ones run on, holding the permits: the new requests park until the gate frees them.
    fresh = asyncio.ensure_future(parallel_handoff(cap.orch, cap.calls(skill, 4, tag="new", gated=skill == "work"), WorkOut))
    if skill == "work_sync":
        await cap.parked(4)
        assert (await cap.report())["running_tags"] == ["old"] * 4
    else:
        await cap.running(4)
    await cap.gate.open.remote()
    assert all(r.ok for r in await fresh)
    report = await cap.report()
    print(f"\n{skill}: timeouts then new batch: peak {report['peak']}")
    assert report["peak"] == 4


async def test_a_killed_subagent_fails_its_item_and_its_permit_comes_back(cap):
    batch = asyncio.ensure_future(parallel_handoff(cap.orch, cap.calls("work_sync", 4, tag="old", gated=True), WorkOut))
    await cap.running(4)
    victim = (await cap.report())["pids"][0]
    os.kill(victim, signal.SIGKILL)
    await wait_for(lambda: _gone(victim), "the killed subagent to be gone")
    await cap.intervals.killed.remote(victim)  # its body ended when its process did
    await cap.gate.open.remote()
    results = await batch
    assert sum(isinstance(r.error, SubagentLost) for r in results) >= 1
    # The dead replica's permit comes back (Ray's verdict, through the probe): four run again
    # once Ray has restarted the replica.
    await replicas_answer(pool_for(cap.orch.caller, "work_sync").handles())
    again = await parallel_handoff(cap.orch, cap.calls("work_sync", 8, tag="new", seconds=0.5), WorkOut)
    report = await cap.report()
    print(f"\nkilled subagent: peak {report['peak']}")
    assert all(r.ok for r in again)
    assert report["peak"] == 4


async def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_a_paused_driver_neither_grows_the_cap_nor_blocks_it_past_its_work(cap):
    driver = start_driver("hold", cap.orch.name, cap.intervals_name, cap.gate_name)
    try:
        await read_line(driver, "READY")
        await cap.running(4)
        os.kill(driver.pid, signal.SIGSTOP)
        fresh = asyncio.ensure_future(parallel_handoff(cap.orch, cap.calls("work", 4, tag="new"), WorkOut))
        await cap.parked(4)
        await asyncio.sleep(3 * TTL)  # the subject: the driver stays paused past the lease TTL
        report = await cap.report()
        assert report["running_tags"] == ["driver"] * 4 and report["peak"] == 4
        await cap.gate.open.remote()  # the paused driver's work ends (its subagents go on)
        results = await fresh  # ... and the new handoffs run while the driver is still paused
        assert driver.poll() is None
        assert all(r.ok for r in results)
        report = await cap.report()
        print(f"\npaused driver: peak {report['peak']}, new handoffs done while it was still stopped")
        assert report["peak"] == 4
        assert _admitted_as_old_ones_end(await cap.intervals.spans.remote("new"), await cap.intervals.spans.remote("driver"))
        os.kill(driver.pid, signal.SIGCONT)
        assert await read_line(driver, "DONE") == "DONE 4"
    finally:
        os.kill(driver.pid, signal.SIGCONT)
        driver.kill()
        driver.wait()


@contextlib.asynccontextmanager
async def _one_of_four_paused(cap: Cap) -> AsyncIterator[None]:
    """Four gated old bodies, one per replica, and the first one's replica SIGSTOPped for the
    block; after it, every old call must have succeeded."""
    batch = asyncio.ensure_future(parallel_handoff(cap.orch, cap.calls("work", 4, tag="old", gated=True), WorkOut))
    await cap.running(4)
    paused = (await cap.report())["pids"][0]
    os.kill(paused, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(paused, signal.SIGCONT)
    assert all(r.ok for r in await batch)


async def test_a_subagent_paused_past_the_ttl_keeps_its_permit_until_it_resumes(spread_cap):
    cap = spread_cap
    async with _one_of_four_paused(cap):
        fresh = asyncio.ensure_future(parallel_handoff(cap.orch, cap.calls("work", 4, tag="new"), WorkOut))
        await cap.parked(3)  # the call sent to the paused replica waits there, not at the semaphore
        await asyncio.sleep(3 * TTL)  # the subject: paused past the lease TTL
        await cap.gate.open.remote()  # three old bodies end; the paused one cannot
        await wait_for(lambda: cap.at_least("finished", 3), "the other old bodies to end")
        report = await cap.report()
        assert report["peak"] == 4, report
    assert all(r.ok for r in await fresh)
    report = await cap.report()
    print(f"\npaused subagent: peak {report['peak']}")
    assert report["peak"] == 4


async def test_a_subagent_paused_across_a_restart_of_the_semaphore_service_keeps_its_permit(spread_cap):
    """The restarted service lost its tables; the three live replicas re-register their leases
    within its recovery window, the paused one cannot. Nothing may be granted on top of the
    paused body's permit, however long after the window it resumes."""
    cap = spread_cap
    async with _one_of_four_paused(cap):
        service = ray.get_actor(ClusterSemaphore.service_name(cap.semaphore.scope), namespace="soloist")
        ray.kill(service, no_restart=False)
        await wait_for(lambda: _state_of(cap, "recovering"), "the restarted service to recover its scope")
        await asyncio.sleep(3 * TTL)  # the subject: paused past the restarted service's recovery window
        fresh = asyncio.ensure_future(parallel_handoff(cap.orch, cap.calls("work", 4, tag="new"), WorkOut))
        await cap.gate.open.remote()  # three old bodies end; the paused one cannot
        await wait_for(lambda: cap.at_least("finished", 3), "the other old bodies to end")

        async def parked_or_over() -> bool:
            return (await cap.semaphore.statistics()).waiting >= 3 or (await cap.report())["peak"] > 4
        await wait_for(parked_or_over, "the new calls to park at the semaphore (or to run past the cap)")
        report = await cap.report()
        assert report["peak"] == 4, report
    assert all(r.ok for r in await fresh)
    report = await cap.report()
    assert report["peak"] == 4, report


async def _state_of(cap: Cap, state: str) -> bool:
    return (await cap.semaphore.statistics()).state == state
