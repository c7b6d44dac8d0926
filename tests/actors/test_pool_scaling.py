"""Subagent pools grow with their load and shrink after it, counted from outside the runtime.

Replica processes are counted in Ray's table of named actors (every replica is the named
actor ``soloist:sub:{key}:{skill}:{slot}``, ``live_replica_names``) and by the pids the skill
bodies report; concurrency and exactly-once by the lines the bodies append (and fsync) to a
log in ``tmp_path`` as they enter and leave: one ``enter`` line per body, by call id, and
the most bodies inside at once read from the order of those lines. Tests wait on what they
need to be true (a replica listed, a body inside, a process gone), never on the clock.
"""

from __future__ import annotations

import asyncio
import os
import signal
import urllib.request
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import ray
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from actors import Call, Orchestrator, PoolPolicy, SkillRegistry, SubagentLost, handoff, parallel_handoff, pool_for
from cluster import metrics, replica_budget, serve_metrics, set_replica_budget
from cluster import live_replica_names
from tests._ledger import append_line
from tests._waits import eventually, process_gone
from tests._models import Empty

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

#: Small downscale delays keep these tests fast; a replica that never served a call still
#: waits ``FIRST_CALL_GRACE_S`` (2 s) before it retires.
DOWNSCALE_S = 0.5


class BodyIn(BaseModel):
    log: str
    call_id: str
    #: A file: the body stays inside until it exists.
    gate: str = ""
    seconds: float = 0.0


class BodyOut(BaseModel):
    call_id: str
    pid: int
    replica: str


async def body(inp: BodyIn) -> BodyOut:
    """The skill under test: notes its entry and exit (call id, pid, replica name) in the log,
    waits for its gate or sleeps in between."""
    replica = ray.get_runtime_context().get_actor_name() or "?"
    append_line(inp.log, f"enter {inp.call_id} {os.getpid()} {replica}")
    try:
        if inp.gate:
            while not os.path.exists(inp.gate):
                await asyncio.sleep(0.01)
        if inp.seconds:
            await asyncio.sleep(inp.seconds)
    finally:
        append_line(inp.log, f"exit {inp.call_id} {os.getpid()} {replica}")
    return BodyOut(call_id=inp.call_id, pid=os.getpid(), replica=replica)


class Line(NamedTuple):
    event: str
    call_id: str
    pid: int
    replica: str


def read_log(log: Path) -> list[Line]:
    if not log.exists():
        return []
    return [Line(event, call_id, int(pid), replica)
            for event, call_id, pid, replica in (line.split() for line in log.read_text().splitlines())]


def most_inside(lines: Iterable[Line]) -> int:
    """The most bodies inside at once, from the order of their enter and exit lines."""
    inside = peak = 0
    for line in lines:
        inside += 1 if line.event == "enter" else -1
        peak = max(peak, inside)
    return peak


def ran_exactly_once(lines: list[Line], expected: Iterable[str]) -> None:
    ran = [line.call_id for line in lines if line.event == "enter"]
    expected = sorted(expected)
    assert sorted(ran) == expected, (
        f"ran {len(ran)} bodies for {len(expected)} calls; twice: {sorted({c for c in ran if ran.count(c) > 1})}, "
        f"never: {sorted(set(expected) - set(ran))}")


def scaling_registry(skill: str, **policy: Any) -> SkillRegistry:
    """A registry of its own for one test: ``body`` under ``skill`` (a pool key of its own)."""
    registry = SkillRegistry(policy=PoolPolicy(**{"downscale_delay_s": DOWNSCALE_S, **policy}))
    registry.register(skill, body)
    return registry


def prefix_of(registry: SkillRegistry, skill: str) -> str:
    return f"soloist:sub:{registry.pool_key}:{skill}:"


async def replicas_of(*prefixes: str) -> set[str]:
    """The live replicas of the pools named by ``prefixes``, from Ray's actor table."""
    names = await asyncio.to_thread(live_replica_names)
    return {name for name in names if name.startswith(prefixes)}


class Sampler:
    """``async with``: samples Ray's actor table until the block ends; the most replicas of
    some pools (by name prefix) seen at once."""

    def __init__(self, *prefixes: str) -> None:
        self._prefixes = prefixes
        self.peak = 0
        self.peak_names: set[str] = set()
        self.samples = 0
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def _run(self) -> None:
        while not self._stop.is_set():
            names = await replicas_of(*self._prefixes)
            self.samples += 1
            if len(names) > self.peak:
                self.peak, self.peak_names = len(names), names
            await asyncio.sleep(0.02)

    async def __aenter__(self) -> "Sampler":
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task


async def none_left(*prefixes: str) -> None:
    """Until every replica of these pools has retired (they have no min_replicas)."""
    await eventually(lambda: replicas_of(*prefixes), lambda names: not names, "the pool's replicas to retire")


async def kill_kept(*prefixes: str) -> None:
    """End the replicas a ``min_replicas`` keeps (they never retire), and wait until Ray has
    dropped them, so no test leaves a process behind."""
    for name in await replicas_of(*prefixes):
        try:
            ray.kill(ray.get_actor(name, namespace="soloist"), no_restart=True)
        except ValueError:
            pass  # gone meanwhile
    await none_left(*prefixes)


def gated_calls(skill: str, log: Path, gate: Path, ids: Iterable[str]) -> list[Call]:
    return [Call(skill, BodyIn(log=str(log), call_id=call_id, gate=str(gate))) for call_id in ids]


async def bodies_inside(log: Path, n: int, what: str) -> list[Line]:
    """Until ``n`` bodies are inside at once (entered, not left)."""
    async def probe() -> list[Line]:
        return read_log(log)

    def inside(lines: list[Line]) -> int:
        return sum(1 if line.event == "enter" else -1 for line in lines)

    return await eventually(probe, lambda lines: inside(lines) >= n, what)


async def statistics_of(pool: Any) -> Any:
    return pool.statistics()


async def burst_over_every_replica(run: Orchestrator, registry: SkillRegistry, skill: str, log: Path, tag: str,
                                   size: int, *, batch_size: int = 0,
                                   while_busy: Callable[[], Awaitable[None]] | None = None,
                                   ) -> tuple[dict[str, int], list[str]]:
    """A gated burst that grows the pool to ``size`` replicas and runs a body in each of them.

    A batch (``batch_size`` calls, default twice the cap: each lane a body and one waiting
    behind it) makes the pool grow. Its lanes stay on the replicas they started on, and a
    grown replica that no call reaches retires after its first-call grace, so each time one
    more replica has started a single gated call is sent, which goes to a started replica
    that has no call (the new one). The gate opens once the pool is at ``size`` in Ray's
    table and the cap's bodies are inside (and ``while_busy`` has returned: every replica has
    a call then). Returns each replica's pid (from the bodies) and the call ids.
    """
    prefix = prefix_of(registry, skill)
    gate = log.parent / f"gate-{tag}"
    pool = pool_for(registry, skill)
    batch_ids = [f"{tag}-batch-{i}" for i in range(batch_size or 2 * run.max_parallel)]
    single_ids: list[str] = []
    singles: list[asyncio.Future[BodyOut]] = []
    batch = asyncio.ensure_future(parallel_handoff(run, gated_calls(skill, log, gate, batch_ids), BodyOut))
    try:
        while len(singles) < size:
            stats = await eventually(lambda: statistics_of(pool), lambda s: s.ready > len(singles),
                                     f"replica {len(singles) + 1} of {size} to start")
            for _ in range(min(stats.ready, size) - len(singles)):
                single_ids.append(f"{tag}-single-{len(singles)}")
                (call,) = gated_calls(skill, log, gate, single_ids[-1:])
                singles.append(asyncio.ensure_future(handoff(run, call, BodyOut)))
        await eventually(lambda: replicas_of(prefix), lambda names: len(names) >= size, f"the pool to grow to {size}")
        await bodies_inside(log, run.max_parallel, "the cap's bodies inside")
        if while_busy is not None:
            await while_busy()
    finally:
        gate.touch()
    results = await batch
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    await asyncio.gather(*singles)
    served = {line.replica: line.pid for line in read_log(log) if line.call_id.startswith(f"{tag}-")}
    assert len(served) == size, f"the burst ran in {len(served)} replicas, not {size}: {sorted(served)}"
    return served, batch_ids + single_ids


# ---------------------------------------------------------------------------- growth and shrinking


async def test_a_burst_grows_the_pool_to_its_max_and_back_to_min(tmp_path):
    skill = "scale-burst"
    registry = scaling_registry(skill, min_replicas=1, max_replicas=4, target_ongoing_calls=1)
    prefix = prefix_of(registry, skill)
    log = tmp_path / "log"
    run = Orchestrator(Empty(), caller=registry)
    try:
        pool_for(registry, skill)  # its min_replicas start now
        kept = await eventually(lambda: replicas_of(prefix), lambda names: len(names) == 1, "the min replica to start")
        async with Sampler(prefix) as sampler:
            served, ids = await burst_over_every_replica(run, registry, skill, log, "burst", 4)
        ran_exactly_once(read_log(log), ids)
        assert kept <= set(served)
        assert sampler.peak == 4, f"the table held {sampler.peak} replicas of the pool at once: {sorted(sampler.peak_names)}"
        # Back to min after the downscale delay: the grown replicas end, the kept one stays.
        await eventually(lambda: replicas_of(prefix), lambda names: names == kept, "the pool to shrink back to its min")
        for name, pid in served.items():
            if name not in kept:
                await process_gone(pid)
        (kept_name,) = kept
        os.kill(served[kept_name], 0)  # the min replica's process is still up (raises if it is not)
        assert await replicas_of(prefix) == kept
    finally:
        await run.close()
        await kill_kept(prefix)


async def test_min_zero_ends_every_replica_process_and_the_next_call_starts_one(tmp_path):
    skill = "scale-zero"
    registry = scaling_registry(skill, min_replicas=0, max_replicas=3, target_ongoing_calls=1)
    prefix = prefix_of(registry, skill)
    log = tmp_path / "log"
    run = Orchestrator(Empty(), caller=registry)
    try:
        pool_for(registry, skill)
        assert not await replicas_of(prefix), "a pool with min_replicas=0 started a replica before any call"
        served, ids = await burst_over_every_replica(run, registry, skill, log, "burst", 3)
        ran_exactly_once(read_log(log), ids)
        await none_left(prefix)
        for pid in served.values():
            await process_gone(pid)
        # The next call starts a replica (a new process) and waits for it.
        out = await handoff(run, Call(skill, BodyIn(log=str(log), call_id="after")), BodyOut)
        assert out.pid not in served.values()
        ran_exactly_once(read_log(log), ids + ["after"])
        await none_left(prefix)
        await process_gone(out.pid)
    finally:
        await run.close()
        await none_left(prefix)


# ---------------------------------------------------------------------------- limits while scaling


async def test_the_cluster_wide_budget_holds_while_three_runs_burst_together(tmp_path):
    """Three runs, each with a pool of its own that wants 4 replicas, burst at once under a
    budget of 3 places beyond the replicas already up: the cluster never holds more, and
    every call runs exactly once (a pool waits for another's replicas to retire)."""
    skills = ["budget-a", "budget-b", "budget-c"]
    registries = [scaling_registry(skill, min_replicas=0, max_replicas=4, target_ongoing_calls=1) for skill in skills]
    prefixes = [prefix_of(registry, skill) for registry, skill in zip(registries, skills)]
    log = tmp_path / "log"
    previous = replica_budget().limit
    others = await replicas_of("soloist:sub:")  # replicas of other pools count against the budget too
    limit = len(others) + 3
    set_replica_budget(limit)
    runs = [Orchestrator(Empty(), caller=registry) for registry in registries]
    expected = [f"{skill}-{i}" for skill in skills for i in range(12)]
    try:
        async def burst(run: Orchestrator, skill: str) -> None:
            calls = [Call(skill, BodyIn(log=str(log), call_id=f"{skill}-{i}", seconds=0.1)) for i in range(12)]
            results = await parallel_handoff(run, calls, BodyOut)
            assert all(r.ok for r in results), [r.error for r in results if not r.ok]

        async with Sampler("soloist:sub:") as everyone, Sampler(*prefixes) as mine:
            await asyncio.gather(*(burst(run, skill) for run, skill in zip(runs, skills)))
        lines = read_log(log)
        ran_exactly_once(lines, expected)
        assert everyone.peak <= limit, (
            f"{everyone.peak} replicas up at once under a budget of {limit}: {sorted(everyone.peak_names)}")
        assert mine.peak == 3, f"the three pools held {mine.peak} replicas at once: {sorted(mine.peak_names)}"
        assert mine.samples > 10, "the table was hardly sampled during the bursts"
        # From the bodies: a process is up at least from its first body's entry to its last
        # body's exit; never more than 3 such spans overlap.
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for index, line in enumerate(lines):
            first.setdefault(line.pid, index)
            last[line.pid] = index
        overlap = max(sum(1 for pid in first if first[pid] <= index <= last[pid]) for index in range(len(lines)))
        assert overlap <= 3, f"{overlap} replica processes ran bodies at overlapping times under a budget of 3"
        assert {line.replica.split(":")[3] for line in lines} == set(skills)
    finally:
        set_replica_budget(previous)
        for run in runs:
            await run.close()
        await none_left(*prefixes)


async def test_a_retired_replica_no_longer_counts_against_the_budget(tmp_path):
    """The budget counts the replicas Ray lists, plus those it granted a place a moment ago:
    once a replica has been created, served and retired, its place is free again at once
    (it does not count on as a grant Ray never listed)."""
    skill = "budget-freed"
    registry = scaling_registry(skill, min_replicas=0, max_replicas=1, target_ongoing_calls=1)
    prefix = prefix_of(registry, skill)
    run = Orchestrator(Empty(), caller=registry)
    try:
        out = await handoff(run, Call(skill, BodyIn(log=str(tmp_path / "log"), call_id="one")), BodyOut)
        await none_left(prefix)
        await process_gone(out.pid)
        before = await replicas_of("soloist:sub:")
        budget = replica_budget()
        after = await replicas_of("soloist:sub:")
        assert budget.used <= len(before | after), (
            f"the budget counts {budget.used} places with {len(before | after)} replicas up: {sorted(before | after)}")
    finally:
        await run.close()
        await none_left(prefix)


async def test_the_cap_holds_while_the_pool_scales(tmp_path):
    """One run (cap 4) whose pool grows from 1 to 8 replicas under 40 calls (a batch of 32 and
    one call per grown replica): never more than 4 bodies inside at once, counted from the
    bodies' own lines, though the calls ran in 8 processes."""
    skill = "scale-cap"
    registry = scaling_registry(skill, min_replicas=1, max_replicas=8, target_ongoing_calls=1)
    prefix = prefix_of(registry, skill)
    log = tmp_path / "log"
    run = Orchestrator(Empty(), caller=registry)
    assert run.max_parallel == 4
    try:
        pool_for(registry, skill)
        kept = await eventually(lambda: replicas_of(prefix), lambda names: len(names) == 1, "the min replica to start")
        async with Sampler(prefix) as sampler:
            served, ids = await burst_over_every_replica(run, registry, skill, log, "cap", 8, batch_size=32)
        lines = read_log(log)
        ran_exactly_once(lines, ids)
        assert len(ids) == 40
        assert most_inside(lines) == 4, f"{most_inside(lines)} bodies inside at once under a cap of 4"
        assert len({line.pid for line in lines}) == 8, "the calls ran in 8 processes: the pool grew while they ran"
        assert sampler.peak == 8, f"the table held {sampler.peak} replicas of the pool at once: {sorted(sampler.peak_names)}"
        await eventually(lambda: replicas_of(prefix), lambda names: names == kept, "the pool to shrink back to its min")
    finally:
        await run.close()
        await kill_kept(prefix)


# ---------------------------------------------------------------------------- replicas that die


async def test_a_replica_killed_during_scale_down_loses_no_call(tmp_path):
    """After a burst, as the grown replicas retire, an idle one is killed (SIGKILL) while calls
    keep coming, three at a time (so they reach every replica, the killed one included).

    Nothing is lost and nothing runs twice: a call Ray failed unsent because the replica was
    restarting is sent again by the runtime; a call Ray cannot vouch for (sent as the process
    died: "may or may not have been executed") fails with ``SubagentLost``, and since the
    killed replica was idle it never ran (the ledger says so) and runs once when retried.
    """
    skill = "scale-kill"
    registry = scaling_registry(skill, min_replicas=0, max_replicas=4, target_ongoing_calls=1, downscale_delay_s=1.0)
    prefix = prefix_of(registry, skill)
    log = tmp_path / "log"
    run = Orchestrator(Empty(), caller=registry)

    async def call(call_id: str) -> BodyOut | BaseException:
        try:
            return await handoff(run, Call(skill, BodyIn(log=str(log), call_id=call_id)), BodyOut)
        except Exception as exc:
            return exc

    try:
        served, expected = await burst_over_every_replica(run, registry, skill, log, "burst", 4)
        up = await replicas_of(prefix)
        victim = next((name for name in sorted(served) if name in up), None)
        assert victim is not None, f"every replica retired before the kill: {sorted(served)}"
        os.kill(served[victim], signal.SIGKILL)  # idle: its burst calls have all returned
        failed: dict[str, BaseException] = {}
        for round_ in range(12):
            ids = [f"after-{round_}-{i}" for i in range(3)]
            expected.extend(ids)
            outcomes = await asyncio.gather(*(call(call_id) for call_id in ids))
            failed.update((call_id, out) for call_id, out in zip(ids, outcomes) if isinstance(out, BaseException))
            await asyncio.sleep((0.0, 0.3, 0.6, 1.0)[round_ % 4])  # around the downscale delay
        await process_gone(served[victim])
        assert all(isinstance(exc, SubagentLost) for exc in failed.values()), failed
        unsent = {call_id: exc for call_id, exc in failed.items() if "The actor is restarting" in str(exc.__cause__)}
        assert not unsent, f"calls Ray never sent (the replica was restarting) failed instead of being sent again: {unsent}"
        ran = {line.call_id for line in read_log(log)}
        assert not ran & set(failed), f"calls that failed had run: {sorted(ran & set(failed))}"
        retried = await asyncio.gather(*(call(call_id) for call_id in failed))
        assert not [out for out in retried if isinstance(out, BaseException)], retried
        ran_exactly_once(read_log(log), expected)
        # Every replica retires, the killed one too (Ray restarted it; no call may reach it).
        await none_left(prefix)
    finally:
        await run.close()
        await none_left(prefix)


async def until_ray_knows_it_died(name: str) -> None:
    """Until a killed replica's death has reached this process: a call to it fails unsent as
    restarting, or is answered by the restarted replica (not a connection error of a call
    sent to the dead process, which Ray cannot vouch for)."""
    handle = ray.get_actor(name, namespace="soloist")

    async def probe() -> str:
        try:
            await asyncio.wrap_future(handle.ping.remote().future())
            return "answered"
        except ray.exceptions.ActorUnavailableError as exc:
            return "restarting" if "The actor is restarting" in str(exc) else f"unavailable: {exc}"

    await eventually(probe, lambda seen: seen in ("answered", "restarting"), f"Ray to report {name} restarting")


async def test_a_replica_that_dies_is_replaced(tmp_path):
    """The min replica's process is killed: the next calls run in a new process under the
    same name, and the pool holds its min again."""
    skill = "scale-replace"
    registry = scaling_registry(skill, min_replicas=1, max_replicas=2, target_ongoing_calls=1)
    prefix = prefix_of(registry, skill)
    log = tmp_path / "log"
    run = Orchestrator(Empty(), caller=registry)
    try:
        first = await handoff(run, Call(skill, BodyIn(log=str(log), call_id="before")), BodyOut)
        os.kill(first.pid, signal.SIGKILL)
        await process_gone(first.pid)
        await until_ray_knows_it_died(first.replica)
        outs = [await handoff(run, Call(skill, BodyIn(log=str(log), call_id=f"after-{i}")), BodyOut) for i in range(3)]
        assert first.pid not in {out.pid for out in outs}, "a call ran in the killed process"
        assert {out.replica for out in outs} == {first.replica}, "the calls went to the replacement of the min replica"
        assert await replicas_of(prefix) == {first.replica}, "the pool holds its min replica again, and only it"
        ran_exactly_once(read_log(log), ["before", "after-0", "after-1", "after-2"])
    finally:
        await run.close()
        await kill_kept(prefix)


# ---------------------------------------------------------------------------- metrics


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a /metrics page, by (sample name, labels)."""
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


async def metric_reaches(url: str, name: str, labels: dict[str, str], wanted: float) -> None:
    """Until the endpoint shows ``wanted`` for the series (other processes push on their own timer)."""
    key = (name, frozenset(labels.items()))
    await eventually(lambda: asyncio.to_thread(scrape, url), lambda samples: samples.get(key, 0.0) == wanted,
                     f"{name}{labels} to reach {wanted:g} on /metrics")


async def test_the_replica_gauge_and_the_queue_wait_are_on_the_metrics_endpoint(tmp_path):
    """``soloist_subagent_replicas`` follows the pool up to its max and back to its min, and
    ``soloist_subagent_queue_wait_seconds`` counts every call, labelled (pool, skill)."""
    skill = "scale-metrics"
    registry = scaling_registry(skill, min_replicas=1, max_replicas=3, target_ongoing_calls=1)
    prefix = prefix_of(registry, skill)
    labels = {"pool": registry.pool_key, "skill": skill}
    log = tmp_path / "log"
    with serve_metrics(0, addr="127.0.0.1") as server:
        run = Orchestrator(Empty(), caller=registry)
        try:
            pool_for(registry, skill)
            kept = await eventually(lambda: replicas_of(prefix), lambda names: len(names) == 1, "the min replica to start")
            await metric_reaches(server.url, "soloist_subagent_replicas", labels, 1)
            served, ids = await burst_over_every_replica(
                run, registry, skill, log, "burst", 3,
                while_busy=lambda: metric_reaches(server.url, "soloist_subagent_replicas", labels, 3))
            metrics.flush()  # this process's queue waits (the driver records them)
            await metric_reaches(server.url, "soloist_subagent_queue_wait_seconds_count", labels, len(ids))
            await eventually(lambda: replicas_of(prefix), lambda names: names == kept, "the pool to shrink back to its min")
            await metric_reaches(server.url, "soloist_subagent_replicas", labels, 1)
        finally:
            await run.close()
            await kill_kept(prefix)
