"""Subagent pools that no run uses retire, equal registries share their replicas, and a call
that races a retirement runs exactly once; a synchronous skill prints no Ray warning.

Processes are counted from Ray's table of named actors (every replica is the named actor
``soloist:sub:{key}:{skill}:{slot}``), and calls from inside the skill bodies (the pid they
report, a ledger file each body appends to and fsyncs).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray
from pydantic import BaseModel

from actors import Call, Orchestrator, SkillRegistry, handoff, parallel_handoff
from tests._waits import eventually
from tests._models import Empty

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

ROOT = Path(__file__).resolve().parents[2]


class WhoIn(BaseModel):
    ledger: str = ""
    call_id: str = ""


class WhoOut(BaseModel):
    pid: int


def whoami(inp: WhoIn) -> WhoOut:
    """A plain synchronous skill: reports its process and, given a ledger, appends its call to it."""
    if inp.ledger:
        with open(inp.ledger, "a") as ledger:
            ledger.write(f"{inp.call_id} {os.getpid()}\n")
            ledger.flush()
            os.fsync(ledger.fileno())
    return WhoOut(pid=os.getpid())


def fresh_registry(skill: str = "whoami", **options: float) -> SkillRegistry:
    """What a service builds per request: a new registry with the same skill (under ``skill``:
    registries serving it under different names have pools of their own)."""
    registry = SkillRegistry(replicas=2, **options)  # type: ignore[arg-type]
    registry.register(skill, whoami)
    return registry


def subagents() -> set[str]:
    """The names of the live subagent replicas (one process each), from Ray's actor table."""
    return {actor["name"] for actor in ray.util.list_named_actors(all_namespaces=True)
            if actor["namespace"] == "soloist" and actor["name"].startswith("soloist:sub:")}


async def subagents_now() -> set[str]:
    return subagents()


async def test_two_equal_registries_share_one_set_of_replicas():
    before = subagents()
    first, second = fresh_registry(), fresh_registry()
    assert first is not second and first.pool_key == second.pool_key
    runs = [Orchestrator(Empty(), caller=first), Orchestrator(Empty(), caller=second)]
    try:
        pids = [(await handoff(run, Call("whoami"), WhoOut)).pid for run in runs]
        started = subagents() - before
    finally:
        for run in runs:
            await run.close()
    assert pids[0] == pids[1], "the second registry's call ran in the first one's replica"
    assert len(started) <= 1, f"two equal registries started {len(started)} replicas for one call each: {started}"


async def test_a_run_loops_consecutive_turns_within_the_grace_reuse_one_replica():
    run = Orchestrator(Empty(), caller=fresh_registry())
    try:
        pids = []
        for _ in range(4):
            pids.append((await handoff(run, Call("whoami"), WhoOut)).pid)
            await asyncio.sleep(1.0)  # the loop's think time between turns, well inside the default grace
    finally:
        await run.close()
    assert len(set(pids)) == 1, f"a run loop's turns ran in {len(set(pids))} processes: {pids}"


async def test_an_idle_pool_retires_and_its_next_call_runs_in_a_new_replica():
    run = Orchestrator(Empty(), caller=fresh_registry(retire_after_s=0.5))
    try:
        before = subagents()
        first = (await handoff(run, Call("whoami"), WhoOut)).pid
        mine = subagents() - before
        assert mine, "the call started a replica"
        await eventually(subagents_now, lambda now: not (mine & now), "the idle replica to retire")
        second = (await handoff(run, Call("whoami"), WhoOut)).pid
    finally:
        await run.close()
    assert second != first, "the call after the retirement ran in a new process"


async def test_calls_racing_retirement_each_run_exactly_once(tmp_path):
    """A replica retiring as calls reach it: every call answers, and the ledger its bodies
    write holds each call exactly once (never lost, never run twice). Two runs, each on a pool
    of its own, send their calls at once (20 single calls and 4 batches in all): each waits
    for its replicas to start again after every retirement, and the other's calls go on
    meanwhile."""
    ledger = tmp_path / "ledger.txt"
    expected: list[str] = []

    async def calls_racing_retirement(skill: str, singles: range, batches: range) -> None:
        run = Orchestrator(Empty(), caller=fresh_registry(skill, retire_after_s=0.02))
        try:
            for i in singles:
                call_id = f"{skill}:single-{i}"
                expected.append(call_id)
                await handoff(run, Call(skill, WhoIn(ledger=str(ledger), call_id=call_id)), WhoOut)
                # Gaps around the grace period: some calls reach a replica that is about to
                # retire, some one that has retired (a stale handle), some one still warm.
                await asyncio.sleep((0.0, 0.015, 0.025, 0.04)[i % 4])
            for batch in batches:
                calls = [Call(skill, WhoIn(ledger=str(ledger), call_id=f"{skill}:batch-{batch}-{j}")) for j in range(6)]
                expected.extend(f"{skill}:batch-{batch}-{j}" for j in range(6))
                results = await parallel_handoff(run, calls, WhoOut)
                assert all(r.ok for r in results), [r.error for r in results if not r.ok]
                await asyncio.sleep(0.03)
        finally:
            await run.close()

    await asyncio.gather(calls_racing_retirement("whoami", range(0, 10), range(0, 2)),
                         calls_racing_retirement("whoami-too", range(10, 20), range(2, 4)))
    lines = ledger.read_text().splitlines()
    ran = [line.split()[0] for line in lines]
    assert sorted(ran) == sorted(expected), (
        f"ran {len(ran)} bodies for {len(expected)} calls; twice: {sorted({c for c in ran if ran.count(c) > 1})}, "
        f"never: {sorted(set(expected) - set(ran))}")
    for skill in ("whoami", "whoami-too"):
        pids = {pid for call_id, pid in (line.split() for line in lines) if call_id.startswith(f"{skill}:")}
        assert len(pids) > 1, f"no replica of {skill!r} retired during the calls: the race was not exercised"


async def test_batches_started_as_their_pool_retires_run_each_call_exactly_once(tmp_path):
    """Batches that start while the pool retires, again and again: two at once on one run
    (twice the cap wants permits, so the semaphore reports waiters and every replica's
    permit watch is re-sent as the replicas retire), after idle gaps around the grace
    period and well past it. Each call answers, and each body ran exactly once (the ledger): a retiring
    replica refuses a call unrun and exits, and the call runs in the replica created next.
    Two such runs, each on a pool of its own, go at once (16 rounds in all): each waits for its
    replicas to start again after every retirement, and the other's rounds go on meanwhile."""
    ledger = tmp_path / "ledger.txt"
    expected: list[str] = []

    def batch(skill: str, name: str) -> list[Call]:
        ids = [f"{name}-{j}" for j in range(5)]
        expected.extend(ids)
        return [Call(skill, WhoIn(ledger=str(ledger), call_id=call_id)) for call_id in ids]

    async def rounds_racing_retirement(skill: str, rounds: range) -> None:
        registry = SkillRegistry(replicas=3, retire_after_s=0.05)
        registry.register(skill, whoami)
        run = Orchestrator(Empty(), caller=registry, max_parallel=2)
        try:
            for round_ in rounds:
                outcomes = await asyncio.gather(parallel_handoff(run, batch(skill, f"{skill}:r{round_}a"), WhoOut),
                                                parallel_handoff(run, batch(skill, f"{skill}:r{round_}b"), WhoOut))
                failed = [r.error for results in outcomes for r in results if not r.ok]
                assert not failed, f"round {round_}: {failed}"
                # Around the 0.05 s grace (the race), and every other gap well past it, so the
                # replicas that served retire for sure (calls go to the started ones, which
                # are kept busy, and a replica that never served waits 2 s before retiring).
                await asyncio.sleep((0.04, 0.3, 0.05, 0.3, 0.06, 0.3, 0.08, 0.3)[round_ % 8])
        finally:
            await run.close()

    await asyncio.gather(rounds_racing_retirement("whoami", range(0, 8)),
                         rounds_racing_retirement("whoami-too", range(8, 16)))
    lines = ledger.read_text().splitlines()
    ran = [line.split()[0] for line in lines]
    assert sorted(ran) == sorted(expected), (
        f"ran {len(ran)} bodies for {len(expected)} calls; twice: {sorted({c for c in ran if ran.count(c) > 1})}, "
        f"never: {sorted(set(expected) - set(ran))}")
    for skill in ("whoami", "whoami-too"):
        pids = {pid for call_id, pid in (line.split() for line in lines) if call_id.startswith(f"{skill}:")}
        assert len(pids) > 3, f"no replica of {skill!r} retired between the batches: the race was not exercised"


def test_a_sync_skill_prints_no_blocking_ray_get_warning_on_the_drivers_console():
    """Ray forwards every worker's log lines to its driver's console: run a driver as a process
    of its own (a job of its own on the session's Ray) and read everything it printed."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_DEDUP_LOGS="0", RAY_USAGE_STATS_ENABLED="0")
    address = ray.get_runtime_context().gcs_address
    done = subprocess.run([sys.executable, "-m", "tests.actors._sync_skill_driver", "3", address], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    output = done.stdout
    assert done.returncode == 0, output[-3000:]
    assert "DONE RUN0,RUN1,RUN2" in output, output[-3000:]
    # The subagents' lines only, for now: the semaphore service ("(SemaphoreService pid=...)")
    # still blocks its loop in places; that is cluster.semaphore's to fix, not the handoff path's.
    warned = [line for line in output.splitlines() if "blocking ray.get" in line and "SubagentActor" in line]
    assert not warned, "\n".join(warned)
