"""Warm permits: leases reused between handoffs of one process, never more than the cap."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from actors import Call, Orchestrator, SkillRegistry, WarmPermits, handoff, pool_status
from cluster.semaphore import ClusterSemaphore
from tests._models import Tally
from tests._waits import HANG_GUARD_S, eventually
from tests.actors.run_fixtures import EchoIn, EchoOut

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

LONG_LINGER = 60.0
"""A linger no pause of a busy machine comes near, where the reaper must not act."""


@pytest.fixture
def semaphore():
    sem = ClusterSemaphore(f"warm-{uuid.uuid4().hex[:8]}", ttl_s=30.0)  # expiry is not the subject here
    yield sem
    sem.destroy()


async def _held(sem: ClusterSemaphore, expected: int) -> int:
    """The semaphore's ``held`` once it equals ``expected`` (releases are fire-and-forget)."""
    stats = await eventually(sem.statistics, lambda s: s.held == expected, f"held == {expected}")
    return stats.held


async def test_a_returned_lease_is_reused_by_the_next_take(semaphore):
    permits = WarmPermits(semaphore, linger=LONG_LINGER)
    first = await permits.take(4)
    permits.give_back(first, reuse=True)
    second = await permits.take(4)
    assert second == first and permits.reused == 1
    assert await _held(semaphore, 1) == 1
    permits.give_back(second, reuse=False)
    assert await _held(semaphore, 0) == 0


async def test_idle_leases_are_released_after_the_linger(semaphore):
    permits = WarmPermits(semaphore, linger=0.1)
    leases = [await permits.take(4) for _ in range(4)]
    for lease in leases:
        permits.give_back(lease, reuse=True)
    assert await _held(semaphore, 0) == 0


async def test_a_lease_granted_under_another_cap_is_not_reused(semaphore):
    permits = WarmPermits(semaphore, linger=LONG_LINGER)
    wide = [await permits.take(4) for _ in range(4)]
    for lease in wide:
        permits.give_back(lease, reuse=True)
    narrow = await permits.take(2)  # the four wide leases are given back, a new one is granted under 2
    assert narrow.limit == 2 and narrow not in wide and permits.reused == 0
    assert await _held(semaphore, 1) == 1
    permits.give_back(narrow, reuse=False)


async def test_warm_leases_never_let_more_than_the_cap_be_held(semaphore):
    permits = WarmPermits(semaphore, linger=LONG_LINGER)
    in_flight = peak = 0
    four_at_once = asyncio.Event()  # the first holders wait here until the cap is reached

    async def work() -> None:
        nonlocal in_flight, peak
        for _ in range(10):
            lease = await permits.take(4)
            in_flight += 1
            peak = max(peak, in_flight)
            if in_flight == 4:
                four_at_once.set()
            await asyncio.wait_for(four_at_once.wait(), HANG_GUARD_S)
            await asyncio.sleep(0.005)
            in_flight -= 1
            permits.give_back(lease, reuse=True)

    await asyncio.gather(*(work() for _ in range(12)))
    stats = await semaphore.statistics()
    assert peak == 4 and stats.max_held == 4
    assert permits.release_idle() <= 4
    assert await _held(semaphore, 0) == 0


async def test_nothing_is_reused_while_a_request_waits(semaphore):
    permits = WarmPermits(semaphore, linger=5.0)
    mine = [await permits.take(4) for _ in range(4)]
    waiter = asyncio.ensure_future(semaphore.acquire(limit=4))  # someone else queues
    await eventually(semaphore.statistics, lambda s: s.waiting == 1, "the other request is parked")
    for lease in mine:
        permits.give_back(lease, reuse=True)  # released, not kept: the waiter is served first
    other = await waiter
    assert permits.reused == 0
    await semaphore.release(other)
    assert await _held(semaphore, 0) == 0


async def test_a_lease_the_semaphore_no_longer_holds_is_never_reused(semaphore):
    permits = WarmPermits(semaphore, linger=30.0)
    lease = await permits.take(4)
    assert await semaphore.release(lease) is True  # lost behind the cache's back (as by expiry)
    permits.give_back(lease, reuse=True)
    fresh = await permits.take(4)
    assert fresh.lease_id != lease.lease_id and fresh.generation > lease.generation
    assert permits.reused == 0
    permits.give_back(fresh, reuse=False)


async def test_permits_in_use_are_kept_and_quiet_ones_retire(semaphore):
    permits = WarmPermits(semaphore, linger=0.1)
    lease = await permits.take(4)
    assert not permits.retire_if_unused(0.0)  # a lease is out
    permits.give_back(lease, reuse=True)
    assert not permits.retire_if_unused(3_600.0)  # used just now
    # Once the idle lease went back and its threads ended (the linger), nothing is kept.
    await eventually(lambda: asyncio.sleep(0.05, permits.retire_if_unused(0.0)), bool, "the permits to retire")
    assert permits.closed
    assert await _held(semaphore, 0) == 0


async def test_a_replica_forgets_the_scopes_of_runs_it_no_longer_serves() -> None:
    # Every run has a semaphore scope of its own: a replica serving a hundred thousand runs
    # kept one set of permits per run it ever served (each held until the process ended).
    skills = SkillRegistry(replicas=1, retire_after_s=HANG_GUARD_S)  # it stays up until it has forgotten them
    skill = f"forgetful_{uuid.uuid4().hex[:8]}"

    @skills.skill(skill)
    def echo(inp: EchoIn) -> EchoOut:
        return EchoOut(echoed=inp.text)

    runs = [Orchestrator(Tally(), caller=skills) for _ in range(6)]
    try:
        for orch in runs:
            assert (await handoff(orch, Call(skill, EchoIn(text="hi")), EchoOut)).echoed == "hi"
        [pool] = [p for p in await pool_status() if p.skill == skill]
        assert (pool.replicas, pool.scopes) == (1, 6)  # one scope per run, kept while in use
    finally:
        await asyncio.gather(*(orch.close() for orch in runs))
    await eventually(pool_status, lambda pools: [p.scopes for p in pools if p.skill == skill] == [0],
                     "the replica to forget the closed runs' scopes", timeout=HANG_GUARD_S)
