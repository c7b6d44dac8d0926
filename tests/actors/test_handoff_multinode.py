"""Handoffs on a real multi-node cluster (``ray.cluster_utils.Cluster``: several raylets here)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors import Call, CallerFailed, Orchestrator, parallel_handoff
from actors import pool_for
from tests._waits import process_gone
from tests.actors._peak import (NAMESPACE, PeakCounter, SleepIn, SleepOut, gated_calls, open_when_in_flight, replicas_answer,
                               sleepy_registry, wait_until)
from tests._models import Empty

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster(multinode_cluster: Cluster) -> Cluster:
    return multinode_cluster


@pytest.fixture
def run(cluster: Cluster) -> Iterator[tuple[Orchestrator, str, Any]]:
    head = ray.get_runtime_context().get_node_id()
    name = f"mn-peak-{id(object())}"
    # The counter must survive node removal: keep it on the head node.
    counter = PeakCounter.options(
        name=name, namespace=NAMESPACE, scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)
    ).remote()
    orch = Orchestrator(Empty(), caller=sleepy_registry(replicas=4))
    yield orch, name, counter
    asyncio.run(orch.close())
    ray.kill(counter)


def _calls(counter: str, n: int, seconds: float) -> list[Call]:
    return [Call("sleep", SleepIn(counter=counter, seconds=seconds, tag=i)) for i in range(n)]


def _pid(actor: Any) -> int:
    return os.getpid()


async def _replicas_ready(orch: Orchestrator) -> None:
    """Wait until every replica (re-created after the fault) answers, so the next batch measures the cap."""
    await replicas_answer(pool_for(orch.caller, "sleep").handles())


async def _next_batch_reaches_four(orch: Orchestrator, counter: Any, name: str) -> None:
    """After a fault, a gated batch must get 4 bodies inside at once (fewer: a permit leaked)."""
    await _replicas_ready(orch)
    await counter.reset.remote()
    batch = asyncio.ensure_future(parallel_handoff(orch, gated_calls(name, 8, seconds=0.3), SleepOut))
    await open_when_in_flight(counter, 4)
    assert all(r.ok for r in await batch)
    assert (await counter.report.remote())["peak"] == 4


async def test_a_pools_replicas_go_round_robin_over_the_nodes_so_a_batch_reaches_every_node(run):
    # Four replicas needing no CPU, three nodes: one on each node, the fourth beside one of
    # them; a batch of four lanes uses every replica. (Ray ignores a soft node affinity for
    # an actor that needs no resources and picks a random node: all four on one, 1 time in 27.)
    orch, name, counter = run
    nodes = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
    await pool_for(orch.caller, "sleep").start_all()  # calls go only to started replicas
    results = await parallel_handoff(orch, _calls(name, 16, 0.2), SleepOut)
    assert all(r.ok for r in results)
    assert {r.output.node for r in results} == nodes


@ray.remote(num_cpus=0)
def _driver_side_caller(orch: Orchestrator, counter: str) -> int:
    async def go() -> int:
        return sum(r.ok for r in await parallel_handoff(orch, gated_calls(counter, 20, seconds=0.1), SleepOut))

    return asyncio.run(go())


async def test_two_callers_in_other_processes_never_exceed_four_in_flight_in_total(run):
    orch, name, counter = run
    both = asyncio.gather(_driver_side_caller.remote(orch, name), _driver_side_caller.remote(orch, name))
    await open_when_in_flight(counter, 4)
    assert await both == [20, 20]
    assert (await counter.report.remote())["peak"] == 4


async def test_killing_a_subagent_mid_call_fails_that_item_and_the_next_batch_still_reaches_four(run):
    orch, name, counter = run
    pool = pool_for(orch.caller, "sleep")
    batch = asyncio.ensure_future(parallel_handoff(orch, gated_calls(name, 4), SleepOut))  # opened after the kill
    inside = (await wait_until(counter, "current", 4))["inside"]
    pids = {await handle.__ray_call__.remote(_pid): handle for handle in pool.handles()}
    victim_pid = min(pid for pid in pids if pid in inside)  # a replica with bodies inside
    ray.kill(pids[victim_pid], no_restart=False)
    await process_gone(victim_pid)  # only then may the other bodies finish
    await counter.open.remote()
    results = await batch
    failed = [r for r in results if not r.ok]
    assert len(failed) == inside.count(victim_pid) and all(isinstance(r.error, CallerFailed) for r in failed)
    await _next_batch_reaches_four(orch, counter, name)


async def _replicas_off_the_head(orch: Orchestrator, head: str, fresh: list[Orchestrator]) -> tuple[Orchestrator, list[Any], list[str]]:
    """A run whose pool has a replica on a worker node. SPREAD is Ray's best effort (on a
    busy machine it may put every replica on the head), so a fresh pool is made until one is."""
    for _ in range(5):
        replicas = pool_for(orch.caller, "sleep").handles()
        nodes = await asyncio.gather(*(h.node_id.remote() for h in replicas))
        if any(n != head for n in nodes):
            return orch, replicas, nodes
        orch = Orchestrator(Empty(), caller=sleepy_registry(replicas=4))
        fresh.append(orch)
    pytest.fail("Ray placed every replica of five fresh pools on the head node")


async def test_removing_a_worker_node_mid_batch_fails_its_items_and_the_next_batch_still_reaches_four(run, cluster):
    first, name, counter = run
    head = ray.get_runtime_context().get_node_id()
    fresh: list[Orchestrator] = []
    try:
        await _remove_a_worker_node_mid_batch(first, head, fresh, name, counter, cluster)
    finally:
        for orch in fresh:
            await orch.close()


async def _remove_a_worker_node_mid_batch(first: Orchestrator, head: str, fresh: list[Orchestrator], name: str, counter: Any,
                                          cluster: Cluster) -> None:
    orch, replicas, nodes = await _replicas_off_the_head(first, head, fresh)
    victim_id = next(n for n in nodes if n != head)
    victim = next(node for node in cluster.worker_nodes if node.node_id == victim_id)
    batch = asyncio.ensure_future(parallel_handoff(orch, gated_calls(name, 4), SleepOut))  # opened after the removal
    await wait_until(counter, "current", 4)
    doomed = [await h.__ray_call__.remote(_pid) for h, n in zip(replicas, nodes) if n == victim_id]
    cluster.remove_node(victim)
    for pid in doomed:  # the node's workers exit after its raylet: only then may the other bodies finish
        await process_gone(pid)
    await counter.open.remote()
    results = await batch
    failed = [r for r in results if not r.ok]
    assert len(failed) == nodes.count(victim_id)
    assert all(isinstance(r.error, CallerFailed) for r in failed)
    await _next_batch_reaches_four(orch, counter, name)
    cluster.add_node(num_cpus=1, object_store_memory=100 * 1024**2)
