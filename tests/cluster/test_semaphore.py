"""The cluster-wide bounded semaphore: cap, fairness, leak-freedom, death and restart recovery.

In-flight counts are measured from inside the work by a counter actor, never inferred
from the semaphore's own statistics. Nothing here assumes how fast the machine is: work that
must overlap waits at a gate until the counter has seen it overlap, and TTLs are short only
where expiry is what a test is about.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
import ray
from ray.experimental.internal_kv import _internal_kv_list  # Ray's key-value store, read from outside soloist

from cluster import SemaphoreConfigConflict, SemaphoreTimeout, SemaphoreUnavailable
from cluster.semaphore import ClusterSemaphore, Lease, SemaphoreStatistics, held_by_this_process, renew_held_leases
from tests._waits import HANG_GUARD_S, eventually, process_gone
from tests.actors._peak import PeakCounter, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

TTL = 30.0
"""Where expiry is not the subject: no heartbeat delay on a loaded machine comes near it."""

# Where a semaphore service records the owners of guarded leases (cluster/semaphore/_owner_records.py).
_OWNER_RECORDS = "soloist-semaphore-owners"

SHORT_TTL = 5.0
"""Where expiry is the subject: short enough to wait for, and 2/3 of it (the slack between
heartbeats) long enough that a busy machine does not expire a live holder's lease."""


async def _work(sem: ClusterSemaphore, counter: ray.actor.ActorHandle, limit: int, work_s: float,
                gated: bool = False) -> None:
    """Hold a permit while counted in flight; a ``gated`` holder stays until the counter's gate opens."""
    async with sem.hold(limit=limit, timeout=HANG_GUARD_S):
        await counter.enter.remote()
        if gated:
            await counter.gate.remote()
        await asyncio.sleep(work_s)
        await counter.exit.remote()


async def _in_flight(counter: ray.actor.ActorHandle) -> tuple[int, int, int]:
    report = await counter.report.remote()
    return report["current"], report["peak"], report["entered"]


@ray.remote(num_cpus=0)
class Contender:
    """Runs holders from another process against a pickled facade."""

    async def run(self, sem: ClusterSemaphore, counter: ray.actor.ActorHandle, n: int, work_s: float, gated: bool) -> int:
        await asyncio.gather(*(_work(sem, counter, 4, work_s, gated) for _ in range(n)))
        return n

    async def grab(self, sem: ClusterSemaphore, k: int) -> list[str]:
        leases = [await sem.acquire(limit=4, timeout=HANG_GUARD_S) for _ in range(k)]
        return [lease.lease_id for lease in leases]


@pytest.fixture
def sem() -> Iterator[ClusterSemaphore]:
    semaphore = ClusterSemaphore(f"test-{uuid.uuid4().hex[:12]}", ttl_s=TTL)
    yield semaphore
    semaphore.destroy()


@pytest.fixture
def short_ttl_sem() -> Iterator[ClusterSemaphore]:
    semaphore = ClusterSemaphore(f"test-{uuid.uuid4().hex[:12]}", ttl_s=SHORT_TTL)
    yield semaphore
    semaphore.destroy()


async def _wait_for(sem: ClusterSemaphore, predicate, timeout: float = HANG_GUARD_S) -> SemaphoreStatistics:
    return await eventually(sem.statistics, predicate, f"semaphore {sem.scope!r} statistics", timeout)


# ------------------------------------------------------------------- the cap


@pytest.mark.parametrize("limit", [4, 2])
async def test_hundred_concurrent_holders_reach_exactly_the_limit(sem: ClusterSemaphore, limit: int) -> None:
    counter = PeakCounter.remote()
    holders = asyncio.gather(*(_work(sem, counter, limit, 0.02, gated=True) for _ in range(100)))
    await wait_until(counter, "current", limit)  # the limit is reached: the first holders overlap ...
    await counter.open.remote()  # ... then everyone goes on, still counted
    await holders
    current, peak, entered = await _in_flight(counter)
    assert (current, peak, entered) == (0, limit, 100)
    stats = await sem.statistics()
    assert (stats.held, stats.waiting, stats.max_held) == (0, 0, limit)
    assert stats.granted_total == stats.released_total == 100


async def test_two_actors_and_the_driver_share_one_cap_of_four(sem: ClusterSemaphore) -> None:
    counter = PeakCounter.remote()
    actors = [Contender.remote() for _ in range(2)]
    remote_runs = [a.run.remote(sem, counter, 30, 0.03, True) for a in actors]
    everyone = asyncio.gather(*(_work(sem, counter, 4, 0.03, gated=True) for _ in range(30)), *remote_runs)
    await wait_until(counter, "current", 4)
    await counter.open.remote()
    await everyone
    current, peak, entered = await _in_flight(counter)
    assert (current, peak, entered) == (0, 4, 90)
    assert (await sem.statistics()).max_held == 4
    for actor in actors:
        ray.kill(actor)


async def test_waiters_are_served_first_come_first_served(sem: ClusterSemaphore) -> None:
    first = await sem.acquire(limit=1)
    order: list[int] = []

    async def wait_turn(i: int) -> None:
        async with sem.hold(limit=1, timeout=HANG_GUARD_S):
            order.append(i)

    tasks = []
    for i in range(5):
        tasks.append(asyncio.ensure_future(wait_turn(i)))
        await _wait_for(sem, lambda s, n=i + 1: s.waiting == n)
    await sem.release(first)
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]


async def test_reset_peak_restarts_max_held_from_current(sem: ClusterSemaphore) -> None:
    leases = [await sem.acquire() for _ in range(3)]
    await sem.release(leases.pop())
    assert (await sem.statistics()).max_held == 3
    await sem.reset_peak()
    assert (await sem.statistics()).max_held == 2
    for lease in leases:
        await sem.release(lease)


# ------------------------------------------------------------------- no leaks


async def test_cancelling_a_parked_and_a_granted_acquire_leaks_nothing(sem: ClusterSemaphore) -> None:
    held = [await sem.acquire() for _ in range(3)]
    inside = asyncio.Event()

    async def hold_forever() -> None:
        async with sem.hold():
            inside.set()
            await asyncio.sleep(3600)

    granted = asyncio.ensure_future(hold_forever())
    await asyncio.wait_for(inside.wait(), HANG_GUARD_S)
    parked = asyncio.ensure_future(sem.acquire())
    await _wait_for(sem, lambda s: s.held == 4 and s.waiting == 1)

    parked.cancel()
    granted.cancel()
    for task in (parked, granted):
        with pytest.raises(asyncio.CancelledError):
            await task
    for lease in held:
        assert await sem.release(lease) is True

    stats = await sem.statistics()
    assert (stats.held, stats.waiting) == (0, 0)
    four = await asyncio.gather(*(sem.acquire(timeout=HANG_GUARD_S) for _ in range(4)))
    assert (await sem.statistics()).held == 4
    for lease in four:
        await sem.release(lease)


async def test_release_is_idempotent_and_unknown_leases_return_false(sem: ClusterSemaphore) -> None:
    lease = await sem.acquire()
    assert await sem.release(lease) is True
    assert await sem.release(lease) is False
    stranger = Lease(lease_id="nope", scope=sem.scope, holder="x", limit=4)
    assert await sem.release(stranger) is False
    with pytest.raises(ValueError, match="belongs to scope 'other'"):
        await sem.release(Lease(lease_id="nope", scope="other", holder="x", limit=4))


async def test_heartbeats_keep_a_lease_alive_beyond_its_ttl(short_ttl_sem: ClusterSemaphore) -> None:
    sem = short_ttl_sem
    lease = await sem.acquire()
    await asyncio.sleep(SHORT_TTL * 2)  # the subject is the passing of time: at least two TTLs, however busy the machine
    stats = await sem.statistics()
    assert (stats.held, stats.expired_total) == (1, 0)
    assert await sem.release(lease) is True


async def test_permits_of_a_killed_holder_are_recovered_after_the_ttl(short_ttl_sem: ClusterSemaphore) -> None:
    sem = short_ttl_sem
    holder = Contender.remote()
    assert len(await holder.grab.remote(sem, 4)) == 4
    ray.kill(holder)
    started = time.monotonic()

    counter = PeakCounter.remote()
    holders = asyncio.gather(*(_work(sem, counter, 4, 0.3, gated=True) for _ in range(4)))
    await wait_until(counter, "current", 4)  # all four permits came back ...
    waited = time.monotonic() - started
    await counter.open.remote()
    await holders
    current, peak, _ = await _in_flight(counter)
    assert (current, peak) == (0, 4)
    stats = await sem.statistics()
    # ... by expiry (never released by anyone), and not before the TTL ran out.
    assert (stats.expired_total, stats.released_total) == (4, 4), stats
    assert waited > SHORT_TTL * 0.5, f"the dead holder's permits came back after {waited:.1f}s, before its TTL"
    print(f"permits of a killed holder came back after {waited:.1f}s (ttl {SHORT_TTL:g}s)")


# ------------------------------------------------------------------- control is never starved


@pytest.fixture
def unexpiring_sem() -> Iterator[ClusterSemaphore]:
    """A TTL no heartbeat delay reaches: with 2,000 calls queued from this process, a busy
    machine can delay its renewals past 30 s, and expiries would grant waiters behind the test's back."""
    semaphore = ClusterSemaphore(f"test-{uuid.uuid4().hex[:12]}", ttl_s=3600.0)
    yield semaphore
    semaphore.destroy()


async def test_release_returns_quickly_while_two_thousand_acquires_are_parked(unexpiring_sem: ClusterSemaphore) -> None:
    sem = unexpiring_sem
    held = [await sem.acquire() for _ in range(4)]
    parked = [asyncio.ensure_future(sem.acquire()) for _ in range(2000)]
    await _wait_for(sem, lambda s: s.waiting == 2000)

    # Control calls have their own concurrency group: they are answered while 2,000 acquires
    # stay parked (queued behind them they would never be). How fast is for the benchmarks.
    started = time.monotonic()
    assert await asyncio.wait_for(sem.release(held.pop()), HANG_GUARD_S) is True
    released_in = time.monotonic() - started
    started = time.monotonic()
    await asyncio.wait_for(sem.statistics(), HANG_GUARD_S)
    print(f"with 2000 parked: release {released_in * 1000:.0f} ms, statistics {(time.monotonic() - started) * 1000:.0f} ms")

    await _wait_for(sem, lambda s: s.waiting == 1999 and s.held == 4)
    for task in parked:
        task.cancel()
    results = await asyncio.gather(*parked, return_exceptions=True)
    granted = [r for r in results if isinstance(r, Lease)]
    for lease in granted + held:
        await sem.release(lease)
    stats = await _wait_for(sem, lambda s: s.waiting == 0)
    assert stats.held == 0


# ------------------------------------------------------------------- a holder reported lost


@ray.remote(num_cpus=0, max_restarts=-1)
class GuardedHolder:
    """Holds guarded leases as a subagent replica does, and answers the semaphore's probes
    (counting them, so a test can wait for the semaphore to have asked)."""

    def __init__(self) -> None:
        self.probes = 0

    async def grab(self, sem: ClusterSemaphore, k: int) -> list[Lease]:
        me = ray.get_runtime_context().current_actor
        return [await sem.acquire(limit=4, timeout=HANG_GUARD_S, owner=me) for _ in range(k)]

    async def holds_leases(self, lease_ids: list[str]) -> list[bool]:
        self.probes += 1
        return held_by_this_process(lease_ids)

    async def renew_leases(self) -> bool:
        return await asyncio.to_thread(renew_held_leases)

    async def probed(self) -> int:
        return self.probes

    async def release(self, sem: ClusterSemaphore, lease: Lease) -> bool:
        return await sem.release(lease)

    async def pid(self) -> int:
        return os.getpid()


async def test_an_owner_is_recorded_outside_the_service_while_it_holds_guarded_leases_and_only_then(
    sem: ClusterSemaphore,
) -> None:
    """What a restarted service asks is read from the cluster's key-value store: the record of
    an owner exists before its lease is used, and is gone once it holds nothing (the records
    stay bounded by the live owners, however many replicas came and went)."""
    holder = GuardedHolder.remote()
    try:
        worker = await holder.__ray_call__.remote(lambda self: ray.get_runtime_context().get_worker_id())

        async def records() -> list[bytes]:
            keys = _internal_kv_list(b"", namespace=_OWNER_RECORDS)
            return [key for key in keys if key.endswith(f"/actor:{worker}".encode())]

        leases = await holder.grab.remote(sem, 2)
        assert len(await records()) == 1
        for lease in leases:
            assert await holder.release.remote(sem, lease) is True
        await eventually(records, lambda found: found == [], "the record of an owner that holds nothing to go")
    finally:
        ray.kill(holder, no_restart=True)


async def test_a_holder_reported_lost_but_alive_keeps_its_permits(unexpiring_sem: ClusterSemaphore) -> None:
    sem = unexpiring_sem
    holder = GuardedHolder.remote()
    try:
        await holder.grab.remote(sem, 4)
        ClusterSemaphore.report_lost(sem.scope, holder)  # the requester's word: the semaphore checks it with Ray
        await eventually(holder.probed.remote, lambda n: n >= 1, "the semaphore probing the reported holder")
        stats = await _wait_for(sem, lambda s: s.suspects == 0)  # its answer ("held") came back
        assert (stats.held, stats.expired_total) == (4, 0), stats
        with pytest.raises(SemaphoreTimeout):
            await sem.acquire(timeout=0)
    finally:
        ray.kill(holder, no_restart=True)


async def test_a_killed_holder_reported_lost_gets_its_permits_back_long_before_the_ttl(
    unexpiring_sem: ClusterSemaphore,
) -> None:
    sem = unexpiring_sem
    holder = GuardedHolder.remote()
    try:
        dead = await holder.grab.remote(sem, 4)
        pid = await holder.pid.remote()
        waiters = [asyncio.ensure_future(sem.acquire(timeout=HANG_GUARD_S)) for _ in range(4)]
        await _wait_for(sem, lambda s: s.waiting == 4)
        os.kill(pid, signal.SIGKILL)
        await process_gone(pid)  # Ray restarts it: same actor, a new process holding nothing
        ClusterSemaphore.report_lost(sem.scope, holder)
        # A TTL of an hour: only the probe the report started can give these permits back in time.
        granted = await asyncio.gather(*waiters)
        stats = await sem.statistics()
        assert (stats.held, stats.expired_total) == (4, 4), stats
        # Fencing: the dead incarnation's leases, given back late, are refused and free nothing.
        for lease in dead:
            assert await sem.release(lease) is False
        assert (await sem.statistics()).held == 4
        for lease in granted:
            assert await sem.release(lease) is True
    finally:
        ray.kill(holder, no_restart=True)


async def test_a_late_report_never_frees_a_lease_granted_while_its_answer_was_on_the_way(
    unexpiring_sem: ClusterSemaphore,
) -> None:
    """A holder's request is granted while the holder is stopped (the answer waits in its
    socket) and a report that it was lost (about an earlier incarnation: a restarted replica
    keeps its actor id) makes the semaphore probe it at once. The holder's answer must count
    the lease it is still acquiring as held: answered "not held", the permit went to the next
    waiter while the holder's work ran too, one more than the cap."""
    sem = unexpiring_sem
    holder = GuardedHolder.remote()
    plain = [await sem.acquire(timeout=HANG_GUARD_S) for _ in range(4)]
    try:
        pid = await holder.pid.remote()
        grabbing = holder.grab.remote(sem, 1)
        await _wait_for(sem, lambda s: s.waiting == 1)
        os.kill(pid, signal.SIGSTOP)
        try:
            await sem.release(plain.pop())  # granted to the stopped holder: its answer waits
            await _wait_for(sem, lambda s: s.held == 4 and s.waiting == 0)
            ClusterSemaphore.report_lost(sem.scope, holder)
            await _wait_for(sem, lambda s: s.suspects == 1)  # the probe is out, to the stopped holder
            waiter = asyncio.ensure_future(sem.acquire(timeout=HANG_GUARD_S))
            await _wait_for(sem, lambda s: s.waiting == 1)
        finally:
            os.kill(pid, signal.SIGCONT)
        (lease,) = await grabbing  # the holder's work may start: it holds a permit
        await eventually(holder.probed.remote, lambda n: n >= 1, "the holder answering the probe")
        stats = await _wait_for(sem, lambda s: s.suspects == 0)
        assert not waiter.done() and (stats.held, stats.expired_total) == (4, 0), stats
        await holder.release.remote(sem, lease)
        plain.append(await asyncio.wait_for(waiter, HANG_GUARD_S))  # the permit goes on only now
    finally:
        for held in plain:
            await sem.release(held)
        ray.kill(holder, no_restart=True)


# ------------------------------------------------------------------- errors


async def test_acquire_raises_semaphore_timeout_and_withdraws_the_request(sem: ClusterSemaphore) -> None:
    lease = await sem.acquire(limit=1)
    with pytest.raises(SemaphoreTimeout, match=rf"semaphore '{sem.scope}'.*timeout=0.2s.*limit=1"):
        await sem.acquire(limit=1, timeout=0.2)
    with pytest.raises(SemaphoreTimeout):
        await sem.acquire(limit=1, timeout=0)
    assert (await sem.statistics()).waiting == 0
    await sem.release(lease)
    assert isinstance(await sem.acquire(limit=1, timeout=0), Lease)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scope": ""}, "scope must be a non-empty string"),
        ({"scope": "s", "permits": 0}, r"permits must be an int in 1\.\.4, got 0"),
        ({"scope": "s", "permits": 5}, r"permits must be an int in 1\.\.4, got 5"),
        ({"scope": "s", "ttl_s": 0}, "ttl_s must be a finite number"),
    ],
)
def test_bad_constructor_arguments_raise_value_error_naming_them(kwargs: dict, message: str) -> None:
    scope = kwargs.pop("scope")
    with pytest.raises(ValueError, match=message):
        ClusterSemaphore(scope, **kwargs)


def test_every_bad_constructor_argument_is_reported_at_once() -> None:
    with pytest.raises(ValueError, match="scope .*; permits .*; ttl_s"):
        ClusterSemaphore("", permits=7, ttl_s=-1)


@pytest.mark.parametrize("limit", [0, 7, True])
async def test_bad_limit_raises_value_error_naming_it(sem: ClusterSemaphore, limit: int) -> None:
    with pytest.raises(ValueError, match=rf"limit must be an int in 1\.\.4, got {limit!r}"):
        await sem.acquire(limit=limit)
    with pytest.raises(ValueError, match="limit must be"):
        sem.hold(limit=limit)


async def test_bad_timeout_raises_value_error_naming_it(sem: ClusterSemaphore) -> None:
    with pytest.raises(ValueError, match="timeout must be None or a finite number >= 0, got -1"):
        await sem.acquire(timeout=-1)


async def test_reopening_a_scope_with_another_configuration_is_a_conflict(sem: ClusterSemaphore) -> None:
    await sem.statistics()  # the scope exists with permits=4 (a service runs its calls in no promised order)
    other = ClusterSemaphore(sem.scope, permits=2, ttl_s=TTL)
    with pytest.raises(SemaphoreConfigConflict, match="already exists with permits=4"):
        await other.acquire()


async def test_destroyed_semaphore_raises_semaphore_unavailable() -> None:
    sem = ClusterSemaphore(f"test-{uuid.uuid4().hex[:12]}", ttl_s=TTL)
    await sem.statistics()
    sem.destroy()
    with pytest.raises(SemaphoreUnavailable, match="destroyed or died permanently"):
        await sem.acquire(timeout=HANG_GUARD_S)


@ray.remote(num_cpus=0)
class _RunOwner:
    """Stands for a run's orchestrator: the scope's actor only pings it."""

    def ping(self) -> bool:
        return True


async def test_a_run_joining_a_new_scope_waits_for_its_actor_to_start_whatever_the_retiring_timeout() -> None:
    # timeout=0 leaves no time for a scope that keeps retiring; a fresh scope never retires,
    # so the start of its actor (a worker process: over a minute on a loaded node) is waited for.
    scope, owner = f"test-{uuid.uuid4().hex[:12]}", _RunOwner.remote()
    try:
        joined = await asyncio.to_thread(ClusterSemaphore.join_run, scope, "run-a", owner, timeout=0)
        lease = await joined.acquire(timeout=HANG_GUARD_S)
        assert await joined.release(lease)
    finally:
        assert await ClusterSemaphore.leave_run(scope, "run-a") == "retired"
        ray.kill(owner)


async def test_a_semaphore_actor_that_does_not_answer_within_start_timeout_is_unavailable() -> None:
    scope, owner = f"test-{uuid.uuid4().hex[:12]}", _RunOwner.remote()
    try:
        # No actor can be created and answer in no time at all.
        with pytest.raises(SemaphoreUnavailable, match=rf"semaphore '{scope}': its actor did not answer run 'run-a' within 0s"):
            await asyncio.to_thread(ClusterSemaphore.join_run, scope, "run-a", owner, start_timeout=0)
        # The call that timed out may still land once the actor is up; joining again is
        # harmless, and leaving the scope ends its actor either way.
        joined = await asyncio.to_thread(ClusterSemaphore.join_run, scope, "run-a", owner)
        assert (await joined.statistics()).runs == 1
    finally:
        assert await ClusterSemaphore.leave_run(scope, "run-a") == "retired"
        ray.kill(owner)


def test_opening_a_semaphore_without_ray_raises_semaphore_unavailable() -> None:
    code = (
        "from cluster.semaphore import ClusterSemaphore\n"
        "from cluster import SemaphoreUnavailable\n"
        "try:\n    ClusterSemaphore('s')\n"
        "except SemaphoreUnavailable as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert "Ray is not initialised" in out.stdout, out.stderr


# ------------------------------------------------------------------- pickling


async def test_facade_pickles_by_configuration_and_reattaches(sem: ClusterSemaphore) -> None:
    copy = pickle.loads(pickle.dumps(sem))
    assert (copy.scope, repr(copy)) == (sem.scope, repr(sem))
    lease = await copy.acquire()
    assert (await sem.statistics()).held == 1
    assert await sem.release(lease) is True


# ------------------------------------------------------------------- restart
#
# Last in the module: the killed service restarts, and every scope created on it within its
# own ttl_s of the restart starts recovering (no grants until then; see ``SemaphoreService``).
# By the end of this test the window of a 10 s TTL (the default) has passed, but a later
# test here on a ``TTL`` (30 s) scope would wait out the rest of its window in its first acquire.


@pytest.fixture
def slow_recovery_sem() -> Iterator[ClusterSemaphore]:
    """A TTL (and so a recovery window) long enough to observe on a loaded machine."""
    semaphore = ClusterSemaphore(f"test-{uuid.uuid4().hex[:12]}", ttl_s=10.0)
    yield semaphore
    semaphore.destroy()


async def test_cap_holds_across_a_restart_of_the_semaphore_actor(slow_recovery_sem: ClusterSemaphore) -> None:
    sem = slow_recovery_sem
    counter = PeakCounter.remote()
    held = [await sem.acquire() for _ in range(4)]
    waiters = [asyncio.ensure_future(_work(sem, counter, 4, 0.05, gated=True)) for _ in range(6)]
    await _wait_for(sem, lambda s: s.waiting == 6)

    # The service holding the scope (and the tables of every other scope placed on it).
    ray.kill(ray.get_actor(ClusterSemaphore.service_name(sem.scope), namespace="soloist"), no_restart=False)
    recovering = await _wait_for(sem, lambda s: s.state == "recovering")
    assert recovering.held <= 4
    # The live holder's heartbeats re-register its 4 leases; nothing new is granted.
    serving = await _wait_for(sem, lambda s: s.state == "serving")
    assert (serving.held, serving.granted_total) == (4, 0)
    await _wait_for(sem, lambda s: s.waiting == 6)
    assert (await _in_flight(counter))[2] == 0

    for lease in held:
        assert await sem.release(lease) is True
    await wait_until(counter, "current", 4)
    await counter.open.remote()
    await asyncio.gather(*waiters)
    current, peak, entered = await _in_flight(counter)
    assert (current, peak, entered) == (0, 4, 6)
    assert (await sem.statistics()).max_held == 4
    lease = await sem.acquire(timeout=HANG_GUARD_S)
    assert await sem.release(lease) is True
