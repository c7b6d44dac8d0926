"""Metrics on a real multi-node cluster: handoffs run on other nodes (and are called from
another node) and still add up on the one ``/metrics`` endpoint of the driver."""

from __future__ import annotations

import asyncio
import collections

import pytest
import ray
from pydantic import BaseModel
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors import Call, Orchestrator, SkillRegistry, parallel_handoff, pool_for
from cluster import metrics
from tests.cluster.test_metrics import Samples, scrape_until, total, value
from tests._models import Empty

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(900)]


class WhereIn(BaseModel):
    tag: int


class WhereOut(BaseModel):
    tag: int
    node: str


def where_registry() -> SkillRegistry:
    skills = SkillRegistry(replicas=4)  # SPREAD over the three nodes

    @skills.skill("where")
    def where(inp: WhereIn) -> WhereOut:
        return WhereOut(tag=inp.tag, node=ray.get_runtime_context().get_node_id())

    return skills


@pytest.fixture(scope="module")
def cluster(multinode_cluster: Cluster) -> Cluster:
    return multinode_cluster


@ray.remote(num_cpus=0)
def _hand_off_from_here(orch: Orchestrator, n: int) -> tuple[str, list[str]]:
    """A caller in another process on another node; its metrics reach the same collector."""

    async def go() -> list[str]:
        results = await parallel_handoff(orch, [Call("where", WhereIn(tag=i)) for i in range(n)], WhereOut)
        return [r.output.node for r in results]

    return ray.get_runtime_context().get_node_id(), asyncio.run(go())


async def test_handoffs_on_other_nodes_and_from_other_nodes_add_up_on_one_endpoint(cluster):
    head = ray.get_runtime_context().get_node_id()
    worker = next(n.node_id for n in cluster.worker_nodes)
    orch = Orchestrator(Empty(), caller=where_registry())
    name = orch.name
    with metrics.serve_metrics(0, addr="127.0.0.1") as server:
        try:
            await pool_for(orch.caller, "where").start_all()  # calls go only to started replicas
            local = await parallel_handoff(orch, [Call("where", WhereIn(tag=i)) for i in range(12)], WhereOut)
            assert all(r.ok for r in local)
            caller_node, remote_nodes = await _hand_off_from_here.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(worker, soft=False)
            ).remote(orch, 8)
        finally:
            await orch.close()
        assert caller_node == worker != head
        ran_on = collections.Counter([r.output.node for r in local] + remote_nodes)
        assert len(ran_on) >= 2  # the skills really ran on more than one node

        def ready(s: Samples) -> bool:
            return total(s, "soloist_subagent_calls_total", orchestrator=name) == 20 and \
                value(s, "soloist_handoff_total", orchestrator=name, skill="where", outcome="ok") == 20

        samples = await scrape_until(server.url, ready, "20 handoffs counted by callers and subagents")

    o = {"orchestrator": name}
    # Counted by the callers: 12 in this driver, 8 in the task on the worker node.
    assert value(samples, "soloist_handoff_total", skill="where", outcome="ok", **o) == 20
    assert value(samples, "soloist_handoff_seconds_count", skill="where", **o) == 20
    assert value(samples, "soloist_semaphore_wait_seconds_count", **o) == 20
    assert value(samples, "soloist_handoffs_in_flight", **o) == 0
    # Counted by the subagent actors, per node: exactly where the outputs say they ran.
    by_node = {node: total(samples, "soloist_subagent_calls_total", node=node, outcome="ok", **o) for node in ran_on}
    assert by_node == {node: float(n) for node, n in ran_on.items()}
