"""Load: 16 concurrent writers (driver tasks and Ray actors) mixing ``apply`` and
compare-and-set ``apply_batch`` on one orchestrator.

Invariants: the final state is exactly the sum of the acknowledged writes, the
acknowledged versions are exactly 1..N (gapless, none shared, so none lost), the change
stream (``subscribe``) shows the same N versions in order with each write's own
transitions, and no write is applied twice (each writer's counter equals its acks).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
import ray

from actors import Orchestrator, VersionConflict
from coordinators import AgentState, StateTransition
from tests.reliability._support import scaled

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(1800)]

WRITERS = 16  # half driver tasks, half Ray actors
APPLIES = scaled(60, 1_000)  # per writer


def _increment(writer: int, delta: int) -> Any:
    def fn(state: AgentState) -> None:
        mine = state.conversation_state.setdefault(f"w{writer}", {"acks": 0, "sum": 0})
        mine["acks"] += 1
        mine["sum"] += delta
        state.conversation_state["total"] = state.conversation_state.get("total", 0) + delta

    return fn


async def write_many(orch: Orchestrator[AgentState], writer: int, count: int, seed: int) -> list[tuple[int, str, int, int]]:
    """``count`` writes by ``writer``; returns ``(version, kind, delta, conflicts)`` per acknowledged write.

    About 70% use ``apply(fn)``; the other 30% a compare-and-set ``apply_batch``
    built from a fresh snapshot, retried (re-read, rebuilt) on ``VersionConflict``.
    """
    rng = random.Random(seed)
    acked: list[tuple[int, str, int, int]] = []
    for k in range(count):
        delta = rng.randint(1, 1_000)
        if rng.random() < 0.7:
            acked.append((await orch.apply(_increment(writer, delta)), "fn", delta, 0))
            continue
        conflicts = 0
        while True:
            version, state = await orch.versioned_snapshot()
            mine = state.conversation_state.get(f"w{writer}", {"acks": 0, "sum": 0})
            tag = {"write": f"{writer}:{k}"}
            batch = [
                StateTransition("update_state", {"key": f"w{writer}", "value": {"acks": mine["acks"] + 1, "sum": mine["sum"] + delta}}, tag),
                StateTransition("update_state", {"key": "total", "value": state.conversation_state.get("total", 0) + delta}, tag),
            ]
            try:
                acked.append((await orch.apply_batch(batch, expected_version=version), "batch", delta, conflicts))
                break
            except VersionConflict:
                conflicts += 1
                await asyncio.sleep(rng.random() * 0.002 * min(conflicts, 8))  # jittered back-off, as a real client would
    return acked


@ray.remote(num_cpus=0)
class RemoteWriter:
    """A writer in another process, holding a handle the owner delegated on purpose."""

    async def run(self, orch: Orchestrator[AgentState], writer: int, count: int, seed: int) -> list[tuple[int, str, int, int]]:
        assert not orch.read_only
        return await write_many(orch, writer, count, seed)


async def _follow(orch: Orchestrator[AgentState], last: int, seen: list[Any]) -> None:
    """Follow the run live from version 0 until version ``last`` is committed."""
    async for change in orch.subscribe(since=0):
        if change.kind == "agent_state":
            continue
        seen.append(change)
        if change.version >= last:
            return


async def test_sixteen_writers_mixing_apply_and_compare_and_set_lose_nothing_and_apply_nothing_twice(ray_session):
    orch: Orchestrator[AgentState] = Orchestrator(AgentState())
    try:
        total_writes = WRITERS * APPLIES
        seen: list[Any] = []
        follower = asyncio.ensure_future(_follow(orch, total_writes, seen))
        remote = [RemoteWriter.remote() for _ in range(WRITERS // 2)]
        delegated = orch.delegate()
        local_jobs = [write_many(orch, w, APPLIES, seed=w) for w in range(WRITERS // 2)]
        remote_jobs = [a.run.remote(delegated, w, APPLIES, w) for w, a in zip(range(WRITERS // 2, WRITERS), remote)]
        per_writer = await asyncio.gather(*local_jobs, *remote_jobs)

        acks = [ack for writes in per_writer for ack in writes]
        assert len(acks) == total_writes
        versions = sorted(v for v, *_ in acks)
        assert versions == list(range(1, total_writes + 1)), "acknowledged versions are not exactly 1..N"

        version, state = await orch.versioned_snapshot()
        assert version == total_writes
        assert state.conversation_state["total"] == sum(d for _, _, d, _ in acks)
        for w, writes in enumerate(per_writer):
            assert state.conversation_state[f"w{w}"] == {"acks": len(writes), "sum": sum(d for _, _, d, _ in writes)}

        await asyncio.wait_for(follower, 120)
        assert [c.version for c in seen] == list(range(1, total_writes + 1)), "subscribe skipped or repeated a version"
        kind_at = {v: kind for v, kind, _, _ in acks}
        assert all(c.kind == kind_at[c.version] for c in seen)
        batch_tags = [c.transitions[0].metadata["write"] for c in seen if c.kind == "batch"]
        assert len(batch_tags) == len(set(batch_tags)) == sum(1 for a in acks if a[1] == "batch")
        assert sum(c for *_, c in acks) > 0, "the compare-and-set path was never contended"
        stats = await orch.statistics()
        assert stats.applies == total_writes and stats.conflicts == sum(c for *_, c in acks)
        for a in remote:
            ray.kill(a)
    finally:
        await orch.close()
