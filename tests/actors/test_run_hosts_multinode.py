"""Run hosts on a real multi-node cluster: a run on a store file lives on the node of its file.

Each node of the cluster has a disk of its own (``tests.conftest.NODE_DISK_VARIABLE``): the
one store path ``$SOLOIST_TEST_NODE_DISK/runs.sqlite`` is a different file on each node.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors import Orchestrator
from cluster.storage import SqliteStore
from tests.conftest import NODE_DISK_VARIABLE
from tests._models import Tally

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(900)]

STORE = f"${NODE_DISK_VARIABLE}/runs.sqlite"


def bump(state: Tally) -> None:
    state.n += 1


async def _start_runs(names: list[str]) -> list[dict[str, Any]]:
    """Start each run on STORE from this process, write twice, report where it lived, close."""
    placed = []
    for name in names:
        orch = Orchestrator(Tally(), name=name, store=STORE)
        try:
            await orch.apply(bump)
            await orch.apply(bump)
            stats = await orch.statistics()
            placed.append({"name": name, "node": stats.node, "host": stats.host})
        finally:
            await orch.close()
    return placed


@ray.remote(num_cpus=0)
class NodeDriver:
    """A driver on one node: it starts runs as a driver process started on that node does."""

    def start_runs(self, names: list[str]) -> list[dict[str, Any]]:
        return asyncio.run(_start_runs(names))

    def disk(self) -> str:
        return os.environ[NODE_DISK_VARIABLE]


def _stored_versions(disk: str) -> dict[str, int]:
    """Each run of that disk's store file and its last stored version."""
    store = SqliteStore(Path(disk) / "runs.sqlite")
    try:
        found = {}
        for info in store.list_runs():
            checkpoint, entries = store.load(info.name)
            found[info.name] = entries[-1].version if entries else checkpoint.version
        return found
    finally:
        store.close()


async def test_runs_started_by_a_driver_on_each_node_live_on_that_node_and_journal_into_its_file(multinode_cluster: Any) -> None:
    head = ray.get_runtime_context().get_node_id()
    workers = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head]
    names = {head: [f"on-head-{i}" for i in range(4)]}
    names.update({node: [f"on-{node[:8]}-{i}" for i in range(4)] for node in workers})
    drivers = {node: NodeDriver.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
               for node in workers}
    # The head's driver (this process) and each worker's start their runs at the same time.
    placed_remote = [drivers[node].start_runs.remote(names[node]) for node in workers]
    placed = {head: await _start_runs(names[head])}
    for node, ref in zip(workers, placed_remote):
        placed[node] = await ref
    for node, runs in placed.items():
        for run in runs:
            assert run["node"] == node, f"{run['name']} was started on node {node[:8]} but lived on {run['node'][:8]}"
            assert node in run["host"], run
    disks = {head: os.environ[NODE_DISK_VARIABLE], **{node: ray.get(drivers[node].disk.remote()) for node in workers}}
    assert sorted(disks.values()) == sorted(multinode_cluster.disks)  # three nodes, three disks
    for node, disk in disks.items():
        assert _stored_versions(disk) == {name: 2 for name in names[node]}, f"node {node[:8]}'s file"
    for driver in drivers.values():
        ray.kill(driver)

