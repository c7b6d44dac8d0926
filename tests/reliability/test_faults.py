"""Faults, each with the invariant it must keep.

- the orchestrator's process SIGKILLed during a parallel batch: the batch finishes, every
  acknowledged write survives, the run resumes on its own;
- a subagent killed mid-call: that item fails with ``SubagentLost``, the others succeed;
- the driver SIGKILLed mid-run: the run is re-attached by name from its store, every
  acknowledged write is there, and resending every request applies each exactly once;
- the SQLite file full or read-only: the write fails with a clear ``StoreWriteFailed``,
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
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from pydantic import BaseModel

from actors import Orchestrator, OrchestratorNotFound, SubagentLost, parallel_handoff, pool_for
from cluster.storage import SqliteStore, StoreReadOnly, StoreWriteFailed
from tests._waits import HANG_GUARD_S, process_gone
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


async def _acked_more(acked: list[str], n: int) -> None:
    """Until the writer has ``n`` acknowledged writes (each ack is the event; no deadline here)."""
    while len(acked) < n:
        await asyncio.sleep(0.05)


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
        pid = await orch._actor.__ray_call__.remote(lambda self: os.getpid())
        before_kill = len(acked)
        os.kill(pid, signal.SIGKILL)
        await counter.open.remote()
        results = await batch
        assert all(r.ok for r in results), "the handoffs do not depend on the orchestrator process"
        assert (await counter.report.remote())["peak"] == 4
        await asyncio.wait_for(_acked_more(acked, before_kill + 20), HANG_GUARD_S)  # writes go on against the restarted actor
        stop.set()
        await writer
        assert await orch._actor.__ray_call__.remote(lambda self: os.getpid()) != pid
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
        # Gated: all four bodies are inside (one per replica) when the victim is killed.
        batch = asyncio.ensure_future(parallel_handoff(orch, gated_calls(name, 4), SleepOut))
        await wait_until(counter, "current", 4)
        victim = pool_for(orch.caller, "sleep").handles()[0]
        victim_pid = await victim.__ray_call__.remote(lambda self: os.getpid())
        ray.kill(victim, no_restart=False)
        await process_gone(victim_pid)  # only then may the others finish
        await counter.open.remote()
        results = await batch
        failed = [r for r in results if not r.ok]
        assert len(failed) == 1 and isinstance(failed[0].error, SubagentLost) and "'sleep'" in str(failed[0].error)
        assert sum(r.ok for r in results) == 3
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


async def _wait_until_gone(run: str, timeout: float = HANG_GUARD_S) -> None:
    """Ray tears the dead driver's actor down asynchronously: wait until attaching by name
    (without the store) says the run is no longer live."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            Orchestrator.attach(run)
        except OrchestratorNotFound:
            return
        assert time.monotonic() < deadline, "the dead driver's orchestrator never went away"
        await asyncio.sleep(0.1)


def _fill_disk(self: Any) -> None:
    """In the orchestrator: cap the store file at its current size (SQLite then reports SQLITE_FULL)."""

    def cap(conn: Any) -> None:
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        conn.execute(f"PRAGMA max_page_count = {pages}")

    self._store._writer.submit(cap).result()


def _free_disk(self: Any) -> None:
    self._store._writer.submit(lambda conn: conn.execute("PRAGMA max_page_count = 1073741823")).result()


def _read_only(self: Any) -> None:
    """In the orchestrator: swap the store's writer for one on a read-only connection (as the
    storage tests do; root ignores file modes, so chmod cannot make the file read-only)."""
    from cluster.storage import sqlite as sqlite_module
    from cluster.storage._writer import GroupCommitWriter

    store = self._store
    store._healthy_writer = store._writer
    store._writer = GroupCommitWriter(store._file, lambda: sqlite_module._open_connection(store._file, writer=False))


def _writable(self: Any) -> None:
    store = self._store
    store._writer.close()
    store._writer = store._healthy_writer


@pytest.mark.parametrize(
    ("break_it", "fix_it", "error", "message"),
    [(_fill_disk, _free_disk, StoreWriteFailed, "database or disk is full"),
     (_read_only, _writable, StoreReadOnly, "readonly database")],
    ids=["disk-full", "read-only"],
)
async def test_a_full_or_read_only_store_fails_the_write_clearly_and_keeps_the_state(ray_session, tmp_path, break_it, fix_it, error, message):
    path = tmp_path / "s.sqlite"
    orch = Orchestrator(Tally(), store=str(path), name=f"fault-store-{error.__name__}")
    try:
        for i in range(3):
            await orch.apply(_note(f"ok{i}"))
        await orch._actor.__ray_call__.remote(break_it)
        with pytest.raises(error, match=message) as caught:
            await orch.apply(_note("x" * 200_000))
        assert "state in memory is unchanged" in str(caught.value) and str(path) in str(caught.value)
        version, state = await orch.versioned_snapshot()
        assert version == 3 and state.notes == ["ok0", "ok1", "ok2"]
        await orch._actor.__ray_call__.remote(fix_it)
        assert await orch.apply(_note("after")) == 4
    finally:
        await orch.close()
    stored = SqliteStore(path)
    try:
        checkpoint, entries = stored.load(f"fault-store-{error.__name__}")
        assert checkpoint.version + len(entries) == 4 and checkpoint.state["notes"][-1:] in (["after"], ["ok2"])
    finally:
        stored.close()
    again = Orchestrator.attach(f"fault-store-{error.__name__}", store=str(path))
    try:
        assert (await again.snapshot()).notes == ["ok0", "ok1", "ok2", "after"]
    finally:
        await again.close()
