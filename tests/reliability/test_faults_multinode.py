"""A worker node removed from a ``ray.cluster_utils.Cluster`` mid-batch, while the run writes.

Invariants: the items on the lost node fail with ``SubagentLost`` and the rest succeed;
every acknowledged write (made concurrently, from the head node's driver) is in the state;
never more than 4 skill bodies in flight across the cluster; the next batch reaches 4.
"""

from __future__ import annotations

import asyncio
import os

import pytest
import ray
from pydantic import BaseModel
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors import Orchestrator, SubagentLost, parallel_handoff, pool_for
from tests._waits import process_gone
from tests.actors._peak import (NAMESPACE, PeakCounter, SleepOut, gated_calls, open_when_in_flight, replicas_answer,
                               sleepy_registry, wait_until)

pytestmark = [pytest.mark.reliability, pytest.mark.multinode, pytest.mark.timeout(900)]


class Tally(BaseModel):
    notes: list[str] = []


@pytest.fixture(scope="module")
def cluster(multinode_cluster: Cluster) -> Cluster:
    return multinode_cluster


def _pid(actor: object) -> int:
    return os.getpid()


async def test_removing_a_worker_node_mid_batch_loses_no_write_and_leaks_no_permit(cluster):
    head = ray.get_runtime_context().get_node_id()
    name = "rel-node-loss"
    counter = PeakCounter.options(name=name, namespace=NAMESPACE,
                                  scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)).remote()
    orch = Orchestrator(Tally(), caller=sleepy_registry(replicas=4))
    try:
        pool_for(orch.caller, "sleep").handles()  # all four replicas placed before the batch
        acked: list[str] = []
        stop = asyncio.Event()

        async def keep_writing() -> None:
            i = 0
            while not stop.is_set():
                note = f"w{i}"
                await orch.apply(lambda s, note=note: s.notes.append(note))
                acked.append(note)
                i += 1

        writer = asyncio.ensure_future(keep_writing())
        # Gated: the four bodies stay inside until the node and its workers are gone.
        batch = asyncio.ensure_future(parallel_handoff(orch, gated_calls(name, 4), SleepOut))
        await wait_until(counter, "current", 4)
        # The replicas read again now, each busy with a body: one idle before the batch may have
        # retired and been created again meanwhile (a loaded machine's pauses pass its pool's
        # retire_after_s).
        replicas = pool_for(orch.caller, "sleep").handles()
        nodes = await asyncio.gather(*(h.node_id.remote() for h in replicas))
        victim_id = next(n for n in nodes if n != head)
        victim = next(node for node in cluster.worker_nodes if node.node_id == victim_id)
        doomed = [await h.__ray_call__.remote(_pid) for h, n in zip(replicas, nodes) if n == victim_id]
        cluster.remove_node(victim)
        for pid in doomed:
            await process_gone(pid)
        await counter.open.remote()
        results = await batch
        stop.set()
        await writer
        failed = [r for r in results if not r.ok]
        assert len(failed) == nodes.count(victim_id)
        assert all(isinstance(r.error, SubagentLost) for r in failed)
        assert (await counter.report.remote())["peak"] == 4
        assert (await orch.snapshot()).notes == acked, "an acknowledged write was lost"
        # Lost replicas are restarted by Ray on the surviving nodes; once they answer, a batch
        # that cannot reach 4 in flight would mean a leaked permit (a slow restart is not one).
        await replicas_answer(pool_for(orch.caller, "sleep").handles())
        await counter.reset.remote()
        batch = asyncio.ensure_future(parallel_handoff(orch, gated_calls(name, 8, seconds=0.3), SleepOut))
        await open_when_in_flight(counter, 4)  # four bodies inside at once: no permit leaked
        again = await batch
        assert all(r.ok for r in again)
        assert (await counter.report.remote())["peak"] == 4
    finally:
        await orch.close()
        ray.kill(counter)
        cluster.add_node(num_cpus=1, object_store_memory=100 * 1024**2)
