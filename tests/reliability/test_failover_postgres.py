"""A node lost under a run stored in PostgreSQL: the run moves to another node, nothing is lost.

Three driver processes write to one named run on a ``postgresql://`` store, without pause
until the test tells them to stop (after the failover, once each has written again). Its host lives on
a worker node: the run is started from a task there, and a database host prefers the node of
the process that starts it (Ray's preference is not a promise: a host the head node took
anyway is killed, and restarted by Ray, until a worker node holds it). The host's process is
stopped with SIGSTOP, so writes are surely in flight, and the node is removed with SIGKILL to
its raylet and every other process of it (the host's process ends with its raylet).

Invariants, counted from outside the runtime (the drivers' fsynced ledgers and the database's
own rows): Ray restarts the host on another node, which activates the run with a new fencing
epoch; every acknowledged write is in the journal exactly once, versions run 1..N without a
gap or a duplicate, and each driver's acknowledged version is the one stored under its request
id; a writer of an older activation is refused (``WriterFenced``) and changes nothing. The
same holds for a dedicated run (an actor of its own) on PostgreSQL.

PostgreSQL runs on this machine outside Ray (``postgres_server``), so it survives the node.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors import Orchestrator, actor_name, run_host_name
from cluster import SOLOIST_NAMESPACE
from cluster.storage import JournalEntry, PostgresStore, WriterFenced
from tests._waits import HANG_GUARD_S, eventually, file_appears, process_gone
from tests._models import Tally

pytestmark = [pytest.mark.reliability, pytest.mark.multinode, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
RUN = "failover-run"
DEDICATED = "failover-dedicated"
DRIVERS = ("a", "b", "c")
ACKED_BEFORE_KILL = 3  # per driver: every driver is writing when the node goes
ACKED_AFTER_FAILOVER = 3  # per driver, beyond what it had when the node went


def _bump(state: Tally) -> None:
    state.n += 1


@ray.remote(num_cpus=0)
def _start_run(url: str) -> None:
    """Start the run from this task's node: its database host prefers it."""
    Orchestrator(Tally(), name=RUN, store=url, durability="batch", detached=True)


@ray.remote(num_cpus=0)
def _start_dedicated_run(url: str) -> None:
    """Start a dedicated run from this task's node: its actor prefers it."""
    Orchestrator(Tally(), name=DEDICATED, store=url, durability="batch", detached=True, dedicated=True)


def _ledger(path: Path) -> list[tuple[int, str]]:
    if not path.exists():
        return []
    return [(int(version), request_id) for version, request_id in
            (line.split() for line in path.read_text().splitlines() if line.strip())]


def _journal(url: str, run: str = RUN) -> list[tuple[int, str]]:
    """The run's committed writes, read from the database's own table."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return [(int(v), r) for v, r in conn.execute(
            "SELECT version, request_id FROM journal WHERE run = %s ORDER BY version", (run,))]


def _request_rows(url: str, run: str = RUN) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        (count,) = conn.execute("SELECT count(*) FROM requests WHERE run = %s", (run,)).fetchone()
        return int(count)


async def _host_node(name: str) -> tuple[str, int]:
    """The node and pid of the host actor ``name`` as it answers now (a restarting host
    answers once it is up again)."""
    try:
        stats = await ray.get_actor(name, namespace=SOLOIST_NAMESPACE).statistics.remote()
    except (ray.exceptions.ActorUnavailableError, ValueError):
        return "", 0  # restarting, or its name not registered again yet
    return stats.node, stats.pid


async def _on_a_worker(name: str, workers: set[str]) -> str:
    """The node of the named actor (a run host, or a dedicated orchestrator) once it is a worker
    node: one on the head node is killed (Ray restarts it, preferring the node of the process
    that started it) until then."""
    async def probe() -> str:
        handle = ray.get_actor(name, namespace=SOLOIST_NAMESPACE)
        try:
            node = await handle.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id())
        except ray.exceptions.ActorUnavailableError:
            return ""  # restarting
        if node not in workers:
            ray.kill(handle, no_restart=False)
        return node

    node: str = await eventually(probe, lambda found: found in workers, f"{name} on a worker node")
    return node


def _signal_if_alive(pid: int, signum: signal.Signals) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass  # it exited already (with its node's raylet)


@pytest.fixture
def cluster(multinode_cluster: Cluster) -> Iterator[Cluster]:
    """The module's cluster, with as many worker nodes after each test as before it."""
    count = len(multinode_cluster.worker_nodes)
    yield multinode_cluster
    for _ in range(count - len(multinode_cluster.worker_nodes)):
        multinode_cluster.add_node(num_cpus=1, object_store_memory=100 * 1024**2)
    multinode_cluster.wait_for_nodes()


async def test_a_run_on_postgres_moves_off_a_lost_node_with_every_acknowledged_write_once(
        cluster: Cluster, postgres_server: Any, tmp_path: Path) -> None:
    url = postgres_server.fresh_url()
    head = ray.get_runtime_context().get_node_id()
    workers = {node.node_id: node for node in cluster.worker_nodes}
    # A writer of an activation older than the failover: it activates the run before anyone
    # hosts it, so every later activation supersedes it.
    stale = PostgresStore(url)
    old_epoch = stale.activate(RUN, holder={"host": "an activation before the failover"})

    creator = NodeAffinitySchedulingStrategy(next(iter(workers)), soft=False)
    await _start_run.options(scheduling_strategy=creator).remote(url)
    host_name = run_host_name(RUN, store=url)
    assert host_name != run_host_name(RUN)  # a movable host, not a node-bound one
    victim = workers[await _on_a_worker(host_name, set(workers))]
    orch = Orchestrator.attach(RUN, store=url)
    before = await orch.statistics()
    assert before.host == host_name and before.node == victim.node_id
    assert before.epoch is not None and before.epoch > old_epoch
    old_pid = before.pid

    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    address = ray.get_runtime_context().gcs_address
    ledgers = {tag: tmp_path / f"ledger-{tag}" for tag in DRIVERS}
    stop = tmp_path / "stop"
    drivers = [
        subprocess.Popen([sys.executable, str(REPO / "tests" / "reliability" / "_failover_driver.py"), address, url, RUN,
                          tag, str(stop), str(ledgers[tag])], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
        for tag in DRIVERS
    ]
    stopped = False
    try:
        for tag in DRIVERS:
            await file_appears(Path(f"{ledgers[tag]}.node"))
            assert Path(f"{ledgers[tag]}.node").read_text() != victim.node_id, "a driver joined the node to be lost"
        await eventually(lambda: asyncio.sleep(0, [len(_ledger(p)) for p in ledgers.values()]),
                         lambda counts: min(counts) >= ACKED_BEFORE_KILL, "every driver's first acknowledgements")

        os.kill(old_pid, signal.SIGSTOP)  # the host stops mid-write: the drivers' next writes are in flight
        stopped = True
        at_loss = {tag: len(_ledger(path)) for tag, path in ledgers.items()}
        cluster.remove_node(victim, allow_graceful=False)  # SIGKILL to the raylet and the node's other processes

        # Ray restarts the host on a surviving node (only its own statistics: no run activated yet).
        node, new_pid = await eventually(lambda: _host_node(host_name), lambda found: found[0] not in ("", victim.node_id),
                                         "the host restarted on another node", timeout=HANG_GUARD_S * 2)
        assert node in {head, *(n.node_id for n in cluster.worker_nodes)} and new_pid != old_pid
        # The old host ended with its raylet (Ray's workers die with it); had it outlived it, it
        # wakes up only now, after the failover: its writes are fenced, and it exits.
        _signal_if_alive(old_pid, signal.SIGCONT)
        stopped = False
        await process_gone(old_pid)

        await eventually(lambda: asyncio.sleep(0, {tag: len(_ledger(path)) for tag, path in ledgers.items()}),
                         lambda counts: all(counts[tag] >= at_loss[tag] + ACKED_AFTER_FAILOVER for tag in DRIVERS),
                         "every driver's acknowledgements after the failover", timeout=HANG_GUARD_S * 2)
        stop.touch()  # each driver ends after the write it is in
        outputs = [await asyncio.to_thread(d.communicate, timeout=HANG_GUARD_S * 3) for d in drivers]
        assert [d.returncode for d in drivers] == [0] * len(DRIVERS), [err[-3000:] for _, err in outputs]

        after = await orch.statistics()
        assert after.node not in ("", victim.node_id) and after.pid == new_pid
        assert after.epoch is not None and after.epoch > before.epoch  # activated again, fenced apart from the lost host

        acked = {tag: _ledger(path) for tag, path in ledgers.items()}
        journal = _journal(url)
        total = sum(len(writes) for writes in acked.values())
        assert [v for v, _ in journal] == list(range(1, total + 1)), "versions are not 1..N without gaps or duplicates"
        assert len({r for _, r in journal}) == total and _request_rows(url) == total, "a request applied twice"
        stored = dict((r, v) for v, r in journal)
        for tag, writes in acked.items():
            assert [r for _, r in writes] == [f"{tag}-{i}" for i in range(len(writes))], f"driver {tag} missed an acknowledgement"
            assert all(stored.get(r) == v for v, r in writes), f"driver {tag}: an acknowledged write is not stored as promised"
        assert (await orch.snapshot()).n == total

        # A late write of an older activation is refused, and nothing of it is stored.
        with pytest.raises(WriterFenced, match="superseded by epoch") as refused:
            stale.append(RUN, [JournalEntry(version=total + 1, request_id="late", kind="fn", payload={},
                                            created_at=time.time())]).result()
        assert (refused.value.epoch, refused.value.current) == (old_epoch, after.epoch)
        assert _journal(url) == journal and _request_rows(url) == total
    finally:
        if stopped:
            _signal_if_alive(old_pid, signal.SIGCONT)
        _signal_if_alive(old_pid, signal.SIGKILL)  # a no-op once it exited
        for driver in drivers:
            if driver.poll() is None:
                driver.kill()
                driver.communicate()
        stale.close()
        await orch.close()


async def test_a_dedicated_run_on_postgres_moves_off_a_lost_node_with_every_acknowledged_write_once(
        cluster: Cluster, postgres_server: Any) -> None:
    url = postgres_server.fresh_url()
    workers = {node.node_id: node for node in cluster.worker_nodes}
    creator = NodeAffinitySchedulingStrategy(next(iter(workers)), soft=False)
    await _start_dedicated_run.options(scheduling_strategy=creator).remote(url)
    victim = workers[await _on_a_worker(actor_name(DEDICATED), set(workers))]
    orch = Orchestrator.attach(DEDICATED, store=url)
    before = await orch.statistics()
    assert before.host is None and before.node == victim.node_id
    acked: list[tuple[int, str]] = []
    stop = asyncio.Event()  # the writers write without pause until the failover is over

    async def write(tag: str) -> None:
        i = 0
        while not stop.is_set():
            acked.append((await orch.apply(_bump, request_id=f"{tag}-{i}"), f"{tag}-{i}"))
            i += 1

    writers = asyncio.gather(*(write(tag) for tag in DRIVERS))
    stopped = False
    try:
        await eventually(lambda: asyncio.sleep(0, len(acked)), lambda n: n >= ACKED_BEFORE_KILL, "the first acknowledgements")
        os.kill(before.pid, signal.SIGSTOP)  # writes in flight
        stopped = True
        at_loss = len(acked)
        cluster.remove_node(victim, allow_graceful=False)
        _signal_if_alive(before.pid, signal.SIGCONT)
        stopped = False
        await process_gone(before.pid)
        await eventually(lambda: asyncio.sleep(0, len(acked)), lambda n: n >= at_loss + ACKED_AFTER_FAILOVER,
                         "acknowledgements after the failover", timeout=HANG_GUARD_S * 2)
        stop.set()
        await asyncio.wait_for(writers, HANG_GUARD_S * 2)

        after = await orch.statistics()
        assert after.node not in ("", victim.node_id) and after.pid != before.pid and after.restarted
        assert after.epoch is not None and before.epoch is not None and after.epoch > before.epoch
        total = len(acked)
        journal = _journal(url, DEDICATED)
        assert [v for v, _ in journal] == list(range(1, total + 1)) and _request_rows(url, DEDICATED) == total
        assert sorted(acked) == journal, "an acknowledged write is not stored once at the version it was acknowledged with"
    finally:
        if stopped:
            _signal_if_alive(before.pid, signal.SIGCONT)
        writers.cancel()
        await asyncio.gather(writers, return_exceptions=True)
        await orch.close()
