"""A growing pool uses a node added to the cluster while it runs, without a restart
(``ray.cluster_utils.Cluster``: several raylets on this machine, as ``ray start --address``
would add them).

Replicas are counted in Ray's table of named actors; where each call ran, from the node id
its body reports in a log it appends to (and fsyncs) on entry and exit.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import ray
from pydantic import BaseModel
from ray.cluster_utils import Cluster

from actors import Call, Orchestrator, PoolPolicy, SkillRegistry, handoff, parallel_handoff, pool_for
from cluster import live_replica_names
from tests._ledger import append_line
from tests._waits import eventually
from tests._models import Empty

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(900)]


class BodyIn(BaseModel):
    log: str
    call_id: str
    #: A file: the body stays inside until it exists.
    gate: str


class BodyOut(BaseModel):
    call_id: str
    node: str


async def placed(inp: BodyIn) -> BodyOut:
    """The skill under test: notes where it runs (call id, node, replica) as it enters and
    leaves, and waits for its gate in between."""
    context = ray.get_runtime_context()
    node, replica = context.get_node_id(), context.get_actor_name() or "?"
    append_line(inp.log, f"enter {inp.call_id} {node} {replica}")
    try:
        while not os.path.exists(inp.gate):
            await asyncio.sleep(0.01)
    finally:
        append_line(inp.log, f"exit {inp.call_id} {node} {replica}")
    return BodyOut(call_id=inp.call_id, node=node)


class Line(NamedTuple):
    event: str
    call_id: str
    node: str
    replica: str


def read_log(log: Path) -> list[Line]:
    if not log.exists():
        return []
    return [Line(*line.split()) for line in log.read_text().splitlines()]


def gated_calls(skill: str, log: Path, gate: Path, ids: Iterable[str]) -> list[Call]:
    return [Call(skill, BodyIn(log=str(log), call_id=call_id, gate=str(gate))) for call_id in ids]


async def replicas_of(prefix: str) -> set[str]:
    names = await asyncio.to_thread(live_replica_names)
    return {name for name in names if name.startswith(prefix)}


async def statistics_of(pool: Any) -> Any:
    return pool.statistics()


def alive_nodes() -> set[str]:
    return {node["NodeID"] for node in ray.nodes() if node["Alive"]}


@pytest.fixture(scope="module")
def cluster(multinode_cluster: Cluster) -> Cluster:
    return multinode_cluster


async def test_a_node_added_while_the_pool_grows_is_used_without_a_restart(cluster, tmp_path):
    """Each replica reserves a whole CPU: the cluster (2 + 1 + 1 CPUs) holds 4, so a burst that
    wants 8 grows the pool to 4 and waits. A node with 2 CPUs joins: the same pool, in the same
    run, grows onto it, and calls run there."""
    skill = "scale-onto-new-node"
    registry = SkillRegistry(policy=PoolPolicy(min_replicas=0, max_replicas=8, target_ongoing_calls=1,
                                               downscale_delay_s=0.5), num_cpus=1)
    registry.register(skill, placed)
    prefix = f"soloist:sub:{registry.pool_key}:{skill}:"
    log, gate = tmp_path / "log", tmp_path / "gate"
    nodes_before = alive_nodes()
    assert sum(node["Resources"].get("CPU", 0) for node in ray.nodes() if node["Alive"]) == 4
    run = Orchestrator(Empty(), caller=registry)
    pool = pool_for(registry, skill)
    singles: list[asyncio.Future[BodyOut]] = []

    async def one_call_per_started_replica(size: int) -> None:
        """Until ``size`` replicas have started, each with a gated call: a grown replica that
        no call reaches retires (the burst's lanes stay on the replicas they started on)."""
        while len(singles) < size:
            stats = await eventually(lambda: statistics_of(pool), lambda s: s.ready > len(singles),
                                     f"replica {len(singles) + 1} of {size} to start")
            for _ in range(min(stats.ready, size) - len(singles)):
                (call,) = gated_calls(skill, log, gate, [f"single-{len(singles)}"])
                singles.append(asyncio.ensure_future(handoff(run, call, BodyOut)))

    try:
        burst = asyncio.ensure_future(parallel_handoff(run, gated_calls(skill, log, gate, (f"burst-{i}" for i in range(8))),
                                                       BodyOut))
        await one_call_per_started_replica(4)
        assert len(await replicas_of(prefix)) == 4, "the pool grew beyond what the cluster's CPUs hold"
        # A new node joins the running cluster; nothing is restarted.
        new = cluster.add_node(num_cpus=2, object_store_memory=100 * 1024 * 1024)
        cluster.wait_for_nodes()
        assert alive_nodes() - nodes_before == {new.node_id}
        await one_call_per_started_replica(6)
        names = await eventually(lambda: replicas_of(prefix), lambda names: len(names) == 6,
                                 "the pool to grow onto the new node")
        gate.touch()
        results = await burst
        assert all(r.ok for r in results), [r.error for r in results if not r.ok]
        outs = await asyncio.gather(*singles)
        lines = read_log(log)
        assert sorted(line.call_id for line in lines if line.event == "enter") == sorted(
            [f"burst-{i}" for i in range(8)] + [out.call_id for out in outs])
        on_new = {line.replica for line in lines if line.node == new.node_id}
        assert len(on_new) == 2, f"{len(on_new)} replicas ran calls on the new node (2 CPUs): {sorted(on_new)}"
        assert on_new <= names
    finally:
        gate.touch()
        await run.close()
        await eventually(lambda: replicas_of(prefix), lambda names: not names, "the pool's replicas to retire")
