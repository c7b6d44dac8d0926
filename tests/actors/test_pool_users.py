"""A pool's ``min_replicas`` are kept only while the pool has users, and a call waiting for a
place in a full replica budget fails after a bounded wait, saying why.

Replicas are counted in Ray's own table of named actors (each replica is the named actor
``soloist:sub:{key}:{skill}:{slot}``), from outside the pools.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import ray

from actors import Call, Orchestrator, SkillRegistry, handoff
from cluster import live_replica_names, replica_budget, set_replica_budget
from tests._waits import eventually
from tests.actors._pool_user_driver import DOWNSCALE_S, EchoIn, EchoOut, Empty, kept_registry

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

KEEP_S = 5.0  # renewed every third of it: margin for a renewal thread starved on a loaded machine
"""The keep of a min replica past its last renewal, shortened for the test (60 s by default)."""
BUDGET_WAIT_S = 3.0
DRIVER = Path(__file__).with_name("_pool_user_driver.py")
ROOT = Path(__file__).resolve().parents[2]



def replicas_in_ray(registry: SkillRegistry, skill: str) -> set[str]:
    prefix = f"soloist:sub:{registry.pool_key}:{skill}:"
    return {name for name in live_replica_names() if name.startswith(prefix)}


async def replicas_now(registry: SkillRegistry, skill: str) -> set[str]:
    return await asyncio.to_thread(replicas_in_ray, registry, skill)


async def test_a_min_replica_stays_while_its_run_is_open_and_retires_once_it_closed(monkeypatch):
    monkeypatch.setenv("SOLOIST_REPLICA_KEEP_S", str(KEEP_S))
    skill = f"kept-{uuid.uuid4().hex[:6]}"
    registry = kept_registry(skill)
    run = Orchestrator(Empty(), caller=registry)
    try:
        assert (await handoff(run, Call(skill, EchoIn(n=1)), EchoOut)).n == 1
        (kept,) = await replicas_now(registry, skill)
        # Past two keeps and a downscale delay, idle: the open run's process renews its keep.
        await asyncio.sleep(2 * KEEP_S + DOWNSCALE_S)
        assert await replicas_now(registry, skill) == {kept}
        assert (await handoff(run, Call(skill, EchoIn(n=2)), EchoOut)).n == 2
    finally:
        await run.close()
    # Before: a min replica never retired, whether or not anything still used its pool.
    await eventually(lambda: replicas_now(registry, skill), lambda names: not names,
                     "the min replica of a pool nobody uses to retire", timeout=60)


async def test_a_min_replica_retires_once_the_process_that_used_its_pool_ended_without_closing():
    skill = f"orphaned-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SOLOIST_REPLICA_KEEP_S": str(KEEP_S), "RAY_USAGE_STATS_ENABLED": "0"}
    address = ray.get_runtime_context().gcs_address
    namespace = ray.get_runtime_context().namespace
    done = await asyncio.to_thread(subprocess.run, [sys.executable, str(DRIVER), address, namespace, skill],
                                   capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (prefix,) = [line.split(" ", 1)[1] for line in done.stdout.splitlines() if line.startswith("PREFIX ")]

    async def left() -> set[str]:
        return {name for name in await asyncio.to_thread(live_replica_names) if name.startswith(prefix)}

    # Before: the replica outlived its only user for as long as the cluster ran.
    await eventually(left, lambda names: not names, "the min replica of an ended driver's pool to retire", timeout=60)


async def test_a_call_waiting_for_a_place_in_a_full_budget_fails_in_bounded_time_naming_the_budget(monkeypatch):
    monkeypatch.setenv("SOLOIST_REPLICA_KEEP_S", str(KEEP_S))
    monkeypatch.setenv("SOLOIST_REPLICA_BUDGET_WAIT_S", str(BUDGET_WAIT_S))
    holder_skill, starved_skill = f"holder-{uuid.uuid4().hex[:6]}", f"starved-{uuid.uuid4().hex[:6]}"
    holder, starved = kept_registry(holder_skill), kept_registry(starved_skill)
    previous = (await asyncio.to_thread(replica_budget)).limit
    holding = Orchestrator(Empty(), caller=holder)
    waiting = Orchestrator(Empty(), caller=starved)
    try:
        await handoff(holding, Call(holder_skill, EchoIn()), EchoOut)  # its replica takes a place and keeps it
        used = (await asyncio.to_thread(replica_budget)).used
        await asyncio.to_thread(set_replica_budget, used)  # full now
        started = time.monotonic()
        with pytest.raises(RuntimeError) as refused:
            # Before: this waited forever (bounded here so that the test fails instead).
            await asyncio.wait_for(handoff(waiting, Call(starved_skill, EchoIn()), EchoOut), 120)
        took = time.monotonic() - started
        assert BUDGET_WAIT_S <= took < BUDGET_WAIT_S + 30, took
        assert type(refused.value).__name__ == "ReplicaBudgetFull"
        text = str(refused.value)
        assert repr(starved_skill) in text and "'soloist:replica-budget'" in text
        assert f"{used} of {used} places in use" in text
        assert "set_replica_budget" in text and "SOLOIST_REPLICA_BUDGET_WAIT_S" in text
        assert (refused.value.limit, refused.value.used) == (used, used)
        assert await replicas_now(starved, starved_skill) == set()  # nothing started for it
    finally:
        await asyncio.to_thread(set_replica_budget, previous)
        await waiting.close()
        await holding.close()
    # Both pools' kept replicas retire now that nothing uses them: no process is left behind.
    await eventually(lambda: replicas_now(holder, holder_skill), lambda names: not names, "the holder to retire", timeout=60)
    await eventually(lambda: replicas_now(starved, starved_skill), lambda names: not names, "the starved pool to retire",
                     timeout=60)
