"""Faults, each with the invariant it must keep.

- the orchestrator's process SIGKILLed during a parallel batch: the batch finishes, every
  acknowledged write survives, the run resumes on its own;
- a subagent killed mid-call: that item fails with ``SubagentLost``, the others succeed;
- the driver SIGKILLed mid-run: the run is re-attached by name from its store, every
  acknowledged write is there, and resending every request applies each exactly once;
- the SQLite file on a full or read-only file system (a real tmpfs): a clear ``StoreWriteFailed``/``StoreReadOnly``,
  state and version are unchanged, and the run goes on once the disk is back.

Across all of them: never more than 4 skill bodies in flight (measured by the skills), and
no permit leaked (the next batch reaches 4 in flight).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import ray
from pydantic import BaseModel

from actors import Orchestrator, OrchestratorNotFound, SubagentLost, parallel_handoff, pool_for
from cluster.storage import SqliteStore, StoreReadOnly, StoreWriteFailed
from tests._disks import small_disk
from tests._waits import eventually, process_gone
from tests.actors._peak import SleepOut, gated_calls, new_counter, open_when_in_flight, replicas_answer, sleepy_registry, wait_until

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(900)]

DRIVER = Path(__file__).with_name("_driver.py")
REPO = Path(__file__).resolve().parents[2]


class Tally(BaseModel):
    count: int = 0
    notes: list[str] = []


async def _next_batch_reaches_four(orch: Orchestrator[Any], counter: Any, name: str) -> None:
    """Once every replica answers again (Ray restarts a killed one), a batch must reach 4 in
    flight: fewer would mean a permit leaked (the gated bodies wait until 4 are inside)."""
    await replicas_answer(pool_for(orch.caller, "sleep").handles())
    await counter.reset.remote()
    batch = asyncio.ensure_future(parallel_handoff(orch, gated_calls(name, 8, seconds=0.2), SleepOut))
    await open_when_in_flight(counter, 4)
    again = await batch
    assert all(r.ok for r in again), [r.error for r in again if not r.ok]
    report = await counter.report.remote()
    assert report["peak"] == 4, f"a permit leaked or the cap broke: peak {report['peak']}"


def _note(request: str):  # noqa: ANN202
    def fn(state: Tally) -> None:
        state.count += 1
        state.notes.append(request)

    return fn


async def test_sigkill_of_the_orchestrator_during_a_parallel_batch_loses_no_acknowledged_write(ray_session, tmp_path):
    name, counter = new_counter()
    orch = Orchestrator(Tally(), caller=sleepy_registry(replicas=4), store=str(tmp_path / "k.sqlite"), name="fault-orch-kill")
    try:
        acked: list[str] = []

        async def keep_writing(stop: asyncio.Event) -> None:
            i = 0
            while not stop.is_set():
                await orch.apply(_note(f"w{i}"), request_id=f"w{i}")  # retried through the restart
                acked.append(f"w{i}")
                i += 1

        stop = asyncio.Event()
        writer = asyncio.ensure_future(keep_writing(stop))
        # Gated: the first four bodies stay inside until the orchestrator has been killed.
        batch = asyncio.ensure_future(parallel_handoff(orch, gated_calls(name, 8, seconds=0.2), SleepOut))
        await wait_until(counter, "current", 4)
        pid = (await orch.statistics()).pid
        before_kill = len(acked)
        os.kill(pid, signal.SIGKILL)
        await counter.open.remote()
        results = await batch
        assert all(r.ok for r in results), "the handoffs do not depend on the orchestrator process"
        assert (await counter.report.remote())["peak"] == 4
        await eventually(lambda: _now(len(acked)), lambda n: n >= before_kill + 20,
                         "20 more acknowledged writes against the restarted actor")
        stop.set()
        await writer
        assert (await orch.statistics()).pid != pid
        version, state = await orch.versioned_snapshot()
        assert state.notes == acked and state.count == version == len(acked), "an acknowledged write was lost or doubled"
        assert (await orch.statistics()).restarted
        await _next_batch_reaches_four(orch, counter, name)
    finally:
        await orch.close()
        ray.kill(counter)


async def test_a_subagent_killed_mid_call_fails_only_its_item_and_leaks_no_permit(ray_session):
    name, counter = new_counter()
    orch = Orchestrator(Tally(), caller=sleepy_registry(replicas=4))
    try:
        # Gated: all four bodies are inside when the victim is killed. A replica that started
        # first may hold more than one of them (the pool sends calls to started replicas
        # while the others start), so the victim is a replica with bodies inside, and
        # exactly its bodies fail.
        batch = asyncio.ensure_future(parallel_handoff(orch, gated_calls(name, 4), SleepOut))
        inside = Counter((await wait_until(counter, "current", 4))["inside"])
        pids = {await handle.__ray_call__.remote(lambda self: os.getpid()): handle
                for handle in pool_for(orch.caller, "sleep").handles()}
        victim_pid = min(pid for pid in pids if inside[pid])
        ray.kill(pids[victim_pid], no_restart=False)
        await process_gone(victim_pid)  # only then may the others finish
        await counter.open.remote()
        results = await batch
        failed = [r for r in results if not r.ok]
        assert len(failed) == inside[victim_pid], (inside, victim_pid, [r.error for r in failed])
        assert all(isinstance(r.error, SubagentLost) and "'sleep'" in str(r.error) for r in failed)
        assert sum(r.ok for r in results) == 4 - inside[victim_pid]
        assert (await counter.report.remote())["peak"] == 4
        await orch.apply(_note("after"))  # the run goes on
        await _next_batch_reaches_four(orch, counter, name)
    finally:
        await orch.close()
        ray.kill(counter)


async def test_a_driver_killed_mid_run_is_reattached_by_name_with_every_acknowledged_write_exactly_once(ray_session, tmp_path):
    store = tmp_path / "driver.sqlite"
    run, total = "fault-driver-kill", 400
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    gcs = ray.get_runtime_context().gcs_address
    proc = subprocess.Popen([sys.executable, str(DRIVER), gcs, str(store), run, str(total)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    acks: dict[str, int] = {}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            _, i, version = line.split()
            acks[f"req-{i}"] = int(version)
            if len(acks) >= 60:
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        proc.kill()
        proc.wait()
    assert len(acks) >= 60
    await _wait_until_gone(run)
    orch = Orchestrator.attach(run, store=str(store))
    try:
        version, state = await orch.versioned_snapshot()  # the driver's Counter: count and seen
        assert set(acks) <= set(state.seen), "an acknowledged write was lost with the driver"
        assert len(state.seen) == len(set(state.seen)) == state.count == version
        for request_id, v in acks.items():
            assert await orch.apply(_seen(request_id), request_id=request_id) == v, "a resend was applied again"
        for i in range(total):  # resume: resend everything; each request applies exactly once
            await orch.apply(_seen(f"req-{i}"), request_id=f"req-{i}")
        version, state = await orch.versioned_snapshot()
        assert sorted(state.seen) == sorted(f"req-{i}" for i in range(total)) and version == state.count == total
    finally:
        await orch.close()


def _seen(request: str):  # noqa: ANN202
    def fn(state: Any) -> None:
        state.count += 1
        state.seen.append(request)

    return fn


async def _now(value: Any) -> Any:
    """``value`` as a probe for ``eventually`` (for state this test's own tasks update)."""
    return value


async def _wait_until_gone(run: str) -> None:
    """Ray tears the dead driver's actor down asynchronously: wait until attaching by name
    (without the store) says the run is no longer live."""

    async def live() -> bool:
        try:
            Orchestrator.attach(run)
        except OrchestratorNotFound:
            return False
        return True

    await eventually(live, lambda alive: not alive, "the dead driver's orchestrator to go away")


async def test_a_full_disk_fails_the_write_clearly_keeps_the_state_and_the_run_goes_on_once_freed(ray_session, tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        path = disk.mountpoint / "s.sqlite"
        orch = Orchestrator(Tally(), store=str(path), name="fault-store-full")
        try:
            for i in range(3):
                await orch.apply(_note(f"ok{i}"))
            disk.fill()  # a real full disk: the orchestrator's writer gets ENOSPC from the kernel
            with pytest.raises(StoreWriteFailed, match="database or disk is full") as caught:
                await orch.apply(_note("x" * 200_000))
            assert "state in memory is unchanged" in str(caught.value) and str(path) in str(caught.value)
            version, state = await orch.versioned_snapshot()
            assert version == 3 and state.notes == ["ok0", "ok1", "ok2"]
            disk.free()
            assert await orch.apply(_note("after")) == 4
        finally:
            await orch.close()
        _assert_stored(path, "fault-store-full", ["ok0", "ok1", "ok2", "after"])


async def test_a_read_only_store_refuses_the_run_clearly_and_it_goes_on_once_writable(ray_session, tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        path = disk.mountpoint / "s.sqlite"
        orch = Orchestrator(Tally(), store=str(path), name="fault-store-ro")
        try:
            for i in range(3):
                await orch.apply(_note(f"ok{i}"))
        finally:
            await orch.close()
        disk.read_only()  # a real read-only file system (the kernel refuses it while the run writes)
        try:
            with pytest.raises(StoreReadOnly, match="state in memory is unchanged") as caught:
                restarted = Orchestrator.attach("fault-store-ro", store=str(path))  # may already refuse here
                try:
                    await restarted.apply(_note("refused"))
                finally:
                    await restarted.close()
            assert str(path) in str(caught.value)
        finally:
            disk.writable()
        again = Orchestrator.attach("fault-store-ro", store=str(path))
        try:
            assert (await again.snapshot()).notes == ["ok0", "ok1", "ok2"]
            assert await again.apply(_note("after")) == 4
        finally:
            await again.close()
        _assert_stored(path, "fault-store-ro", ["ok0", "ok1", "ok2", "after"])


def _assert_stored(path: Path, run: str, notes: list[str]) -> None:
    """The file holds every acknowledged write, and a run restarted from it reads them back."""
    stored = SqliteStore(path)
    try:
        checkpoint, entries = stored.load(run)
        assert checkpoint.version + len(entries) == len(notes)
    finally:
        stored.close()
