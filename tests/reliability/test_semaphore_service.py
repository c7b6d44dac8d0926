"""A thousand scopes on the semaphore service: the cap, fairness, the actor count and the
drop of a scope's table, with 1,000 runs joined (issue 29, ten thousand runs on one machine).

The runs are hosted by one actor (the service pings it once per round, not once per run).
Caps are counted from a ledger the bodies append to from their own processes (an fsynced
line at the start and at the end of each body), never from the service's statistics;
actor processes are counted in Ray's table of named actors. Tests wait on events: gated
bodies stay inside until the cap is seen reached, and races run to a number of grants.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import ray

from cluster import ClusterSemaphore, SemaphoreUnavailable
from cluster.semaphore import SERVICE_COUNT
from tests._ledger import append_line
from tests._waits import HANG_GUARD_S, eventually
from tests.actors._peak import PeakCounter, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.reliability, pytest.mark.timeout(900)]

SCOPES = 1_000
"""Scopes live on the services while every test of this module runs, each joined by a run."""

BUSY = {0: 2, 1: 3, 2: 4}
"""Scopes (by index) the cap test keeps busy, with their permits."""

HELD, CYCLED = range(10, 110), range(110, 210)
"""Scopes on which the driver holds a lease, and on which it acquires and releases in a loop,
while the busy scopes work."""


@ray.remote(num_cpus=0)
class RunHost:
    """Stands for an actor hosting many runs: the service only pings it."""

    def ping(self) -> bool:
        return True


@ray.remote(num_cpus=0)
class Race:
    """Starts racers together and counts their grants until a total is reached."""

    def __init__(self) -> None:
        self.ready = 0
        self.grants = 0
        self._ready = asyncio.Condition()
        self._go = asyncio.Event()

    async def arrive(self) -> None:
        async with self._ready:
            self.ready += 1
            self._ready.notify_all()
        await self._go.wait()

    async def until_ready(self, n: int) -> None:
        async with self._ready:
            await self._ready.wait_for(lambda: self.ready >= n)

    def go(self) -> None:
        self._go.set()

    def grant(self) -> int:
        self.grants += 1
        return self.grants


@ray.remote(num_cpus=0)
class Bodies:
    """Runs bodies under a scope's permits in its own process; each body appends its start
    and its end to the ledger, from here."""

    async def run(self, sem: ClusterSemaphore, ledger: str, tag: str, bodies: int, rounds: int,
                  counter: Any = None) -> int:
        """``bodies`` concurrent loops of ``rounds`` bodies; the first body of each loop is
        gated by ``counter`` (it stays inside until the test opens the gate)."""
        async def loop() -> None:
            for round_ in range(rounds):
                async with sem.hold(timeout=HANG_GUARD_S):
                    append_line(ledger, f"start {sem.scope} {tag} {os.getpid()}")
                    if counter is not None and round_ == 0:
                        await counter.enter.remote()
                        await counter.gate.remote()
                        await counter.exit.remote()
                    await asyncio.sleep(0.002)
                    append_line(ledger, f"end {sem.scope} {tag} {os.getpid()}")

        await asyncio.gather(*(loop() for _ in range(bodies)))
        return bodies * rounds

    async def race(self, sem: ClusterSemaphore, ledger: str, tag: str, loops: int, race: Any, total: int) -> int:
        """Acquire and release back to back in ``loops`` loops until the race's grants reach ``total``."""
        await race.arrive.remote()
        mine = 0

        async def loop() -> None:
            nonlocal mine
            while True:
                async with sem.hold(timeout=HANG_GUARD_S):
                    if await race.grant.remote() > total:
                        return
                    append_line(ledger, f"start {sem.scope} {tag} {os.getpid()}")
                    mine += 1
                    append_line(ledger, f"end {sem.scope} {tag} {os.getpid()}")

        await asyncio.gather(*(loop() for _ in range(loops)))
        return mine


@ray.remote(num_cpus=0)
def _placements(names: list[str]) -> list[str]:
    return [ClusterSemaphore.service_name(scope) for scope in names]


class Scopes:
    """The module's thousand joined scopes: ``names[i]`` joined by run ``runs[i]``."""

    def __init__(self, prefix: str, host: Any) -> None:
        self.names = [f"{prefix}-{i}" for i in range(SCOPES)]
        self.runs = [f"run-{prefix}-{i}" for i in range(SCOPES)]
        self.host = host
        self.semaphores: dict[str, ClusterSemaphore] = {}


@pytest.fixture(scope="module")
async def scopes(ray_module: None) -> Any:
    prefix = f"svc-{uuid.uuid4().hex[:6]}"
    host = RunHost.remote()
    joined = Scopes(prefix, host)
    for index, permits in BUSY.items():  # created with their own permits before their runs join
        sem = ClusterSemaphore(joined.names[index], permits=permits, ttl_s=10.0)
        await sem.statistics()

    def join(i: int) -> ClusterSemaphore:
        return ClusterSemaphore.join_run(joined.names[i], joined.runs[i], host)

    sems = await asyncio.gather(*(asyncio.to_thread(join, i) for i in range(SCOPES)))
    joined.semaphores = {sem.scope: sem for sem in sems}
    yield joined
    await asyncio.gather(*(ClusterSemaphore.leave_run(s, r) for s, r in zip(joined.names, joined.runs)))
    ray.kill(host)


def _peaks(ledger: Path) -> dict[str, int]:
    """The most bodies of each scope inside at once, in the ledger's order."""
    inside: Counter[str] = Counter()
    peaks: Counter[str] = Counter()
    for line in ledger.read_text().splitlines():
        kind, scope, _, _ = line.split()
        inside[scope] += 1 if kind == "start" else -1
        peaks[scope] = max(peaks[scope], inside[scope])
    assert not +inside, f"bodies still inside at the end: {dict(+inside)}"
    return dict(peaks)


async def test_a_thousand_scopes_are_served_by_service_count_actor_processes(scopes: Scopes) -> None:
    names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                   if a["namespace"] == "soloist" and a["name"].startswith("soloist:sem"))
    assert names == sorted(ClusterSemaphore.service_names()), names
    assert len(names) == SERVICE_COUNT
    services = await ClusterSemaphore.service_statistics()
    assert sum(s.scopes for s in services) >= SCOPES and all(s.scopes > 0 for s in services), services
    # One host actor for a thousand runs: each service counts (and pings) it once, whatever
    # other runs of the session are attached, each with an actor of its own or not.
    runs, run_actors = sum(s.runs for s in services), sum(s.run_actors for s in services)
    assert runs >= SCOPES and runs - run_actors >= SCOPES - SERVICE_COUNT, services
    # Every process places a scope alike: a worker process computes the same services.
    assert await _placements.remote(scopes.names) == [ClusterSemaphore.service_name(s) for s in scopes.names]
    print(f"\n{SCOPES} scopes on {len(names)} service actors: "
          + ", ".join(f"{s.name} {s.scopes} scopes, {s.runs} runs, {s.run_actors} run actors" for s in services))


async def test_busy_scopes_never_exceed_their_permits_while_the_others_hold_and_cycle(
    scopes: Scopes, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    held = [await scopes.semaphores[scopes.names[i]].acquire(timeout=HANG_GUARD_S) for i in HELD]
    stop = asyncio.Event()
    cycles = Counter[str]()

    async def cycle(sem: ClusterSemaphore) -> None:
        while not stop.is_set():
            async with sem.hold(limit=1, timeout=HANG_GUARD_S):
                cycles[sem.scope] += 1

    cyclers = [asyncio.ensure_future(cycle(scopes.semaphores[scopes.names[i]])) for i in CYCLED]
    workers = [Bodies.remote() for _ in range(3)]
    try:
        counters = {i: PeakCounter.remote() for i in BUSY}
        runs = [worker.run.remote(scopes.semaphores[scopes.names[i]], str(ledger), f"w{w}", 4, 20, counters[i])
                for i in BUSY for w, worker in enumerate(workers)]
        for i, permits in BUSY.items():
            await wait_until(counters[i], "current", permits)  # the cap is reached: gated bodies overlap ...
            await counters[i].open.remote()  # ... then everyone goes on
        done = await asyncio.gather(*runs)
        assert sum(done) == len(BUSY) * 3 * 4 * 20
        for i, permits in BUSY.items():
            assert (await counters[i].report.remote())["peak"] == permits
    finally:
        stop.set()
        await asyncio.gather(*cyclers)
        for lease in held:
            await scopes.semaphores[lease.scope].release(lease)
        for worker in workers:
            ray.kill(worker)
    peaks = _peaks(ledger)
    assert peaks == {scopes.names[i]: permits for i, permits in BUSY.items()}, peaks
    assert len(cycles) == len(CYCLED) and min(cycles.values()) >= 1, cycles
    print(f"\nledger peaks {peaks}; {sum(cycles.values())} acquire/release cycles on {len(CYCLED)} other scopes, "
          f"{len(HELD)} scopes held")


async def test_two_processes_on_one_of_a_thousand_scopes_each_get_at_least_forty_percent(
    scopes: Scopes, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    sem = scopes.semaphores[scopes.names[3]]  # four permits; each racer runs four loops
    race = Race.remote()
    racers = [Bodies.remote() for _ in range(2)]
    try:
        total = 400
        mine = [racer.race.remote(sem, str(ledger), tag, 4, race, total) for racer, tag in zip(racers, "ab")]
        await asyncio.wait_for(race.until_ready.remote(2), HANG_GUARD_S)
        await race.go.remote()
        counts = await asyncio.gather(*mine)
    finally:
        for actor in (*racers, race):
            ray.kill(actor)
    by_tag = Counter(line.split()[2] for line in ledger.read_text().splitlines() if line.startswith("start"))
    assert sum(by_tag.values()) == sum(counts) == total
    shares = {tag: by_tag[tag] / total for tag in "ab"}
    print(f"\ngrants a={by_tag['a']} b={by_tag['b']}; shares a={shares['a']:.1%} b={shares['b']:.1%}; "
          f"peak {_peaks(ledger)}")
    assert min(shares.values()) >= 0.4, shares
    assert _peaks(ledger)[sem.scope] <= 4


async def _live(scope: str) -> bool:
    try:
        await ClusterSemaphore.existing_async(scope)
    except SemaphoreUnavailable:
        return False
    return True


async def test_a_scope_is_dropped_once_its_last_run_left_and_no_lease_is_held_and_joins_again_at_once(
    scopes: Scopes,
) -> None:
    quiet, busy = scopes.names[500], scopes.names[501]
    # No lease held: the last run's leaving drops the table at once.
    assert await ClusterSemaphore.leave_run(quiet, scopes.runs[500]) == "retired"
    assert not await _live(quiet)
    # A lease held: the table stays (its permit still counts) until it is released.
    sem = scopes.semaphores[busy]
    lease = await sem.acquire(timeout=HANG_GUARD_S)
    assert await ClusterSemaphore.leave_run(busy, scopes.runs[501]) == "retiring"
    stats = await sem.statistics()
    assert (stats.retired, stats.held, stats.runs) == (True, 1, 0), stats
    with pytest.raises(SemaphoreUnavailable, match="retired"):
        await sem.acquire(timeout=0)
    assert await sem.release(lease) is True
    await eventually(lambda: _live(busy), lambda live: not live, "the retired scope's table to be dropped")
    # Joining again works at once, each scope on a fresh table.
    for index, scope in ((500, quiet), (501, busy)):
        joined = await asyncio.to_thread(ClusterSemaphore.join_run, scope, scopes.runs[index], scopes.host, timeout=0)
        stats = await joined.statistics()
        assert (stats.retired, stats.runs, stats.held, stats.granted_total) == (False, 1, 0, 0), stats
        again = await joined.acquire(timeout=HANG_GUARD_S)
        assert await joined.release(again) is True
        scopes.semaphores[scope] = joined
