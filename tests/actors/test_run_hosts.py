"""Runs on shared hosts: one writer per run, few processes, idle runs out of memory, fencing.

Every guarantee is counted from outside the runtime: Ray's actor table for processes, the
store file for what was committed, the drivers' own acknowledgements for what was promised.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.experimental.internal_kv import _internal_kv_list  # Ray's key-value store, read from outside soloist

from actors import (
    Orchestrator,
    SkillRegistry,
    OrchestratorClosed,
    Run,
    RunHostFull,
    answer_interrupt,
    host_statistics,
    hosted_runs,
    open_interrupts,
    run_host_name,
)
from cluster import SOLOIST_NAMESPACE, SemaphoreUnavailable
from cluster.semaphore import ClusterSemaphore
from cluster.storage import SqliteStore, WriterFenced
from coordinators import AgentState
from tests._models import Tally
from tests._waits import HANG_GUARD_S, eventually, file_appears, process_gone
from tests.actors.run_fixtures import EchoIn, EchoOut, counts, skill_registry, three

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

REPO = Path(__file__).resolve().parents[2]
_HOST_RECORDS = "soloist-host-runs"  # where hosts record the runs their drivers' exits close


def bump(state: Tally) -> None:
    state.n += 1


def _live_actor_names(prefix: str) -> list[str]:
    """Named actors alive now, from Ray's table (not from soloist's own counters)."""
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a.get("namespace") == SOLOIST_NAMESPACE and a["name"].startswith(prefix)]


def _names_on_one_host(count: int, prefix: str) -> list[str]:
    """``count`` run names that hash to the same host."""
    host = run_host_name(f"{prefix}-0")
    names = (f"{prefix}-{i}" for i in range(10_000))
    return [n for n in names if run_host_name(n) == host][:count]


def _journal_versions(path: Path, run: str) -> list[int]:
    with sqlite3.connect(path) as conn:
        return [v for (v,) in conn.execute("SELECT version FROM requests WHERE run = ? ORDER BY version", (run,))]


async def test_many_runs_share_a_few_host_processes_and_none_of_their_own() -> None:
    runs = [Orchestrator(Tally(), name=f"shared-{i}") for i in range(60)]
    try:
        await asyncio.gather(*(r.apply(bump) for r in runs))
        pids = {(await r.statistics()).pid for r in runs}
        # The hosts of runs without a database store (those of database runs, left by earlier
        # tests until they retire, are a pool of their own: soloist:host:db:<i>).
        hosts = [h for h in _live_actor_names("soloist:host:") if not h.startswith("soloist:host:db:")]
        assert len(pids) <= len(hosts) <= 2, (pids, hosts)
        assert not _live_actor_names("soloist:orch:shared-")  # no actor per run
        assert all(r.hosted for r in runs)
        assert sorted(n for n in Orchestrator.list_live() if n.startswith("shared-")) == sorted(r.name for r in runs)
    finally:
        await asyncio.gather(*(r.close() for r in runs))
    assert not [n for n in Orchestrator.list_live() if n.startswith("shared-")]


async def test_a_dedicated_run_gets_an_actor_process_of_its_own() -> None:
    hosted, dedicated = Orchestrator(Tally(), name="mode-hosted"), Orchestrator(Tally(), name="mode-own", dedicated=True)
    try:
        assert hosted.hosted and not dedicated.hosted
        assert _live_actor_names("soloist:orch:mode-own") == ["soloist:orch:mode-own"]
        assert (await hosted.statistics()).host == run_host_name("mode-hosted")
        assert (await dedicated.statistics()).host is None
        assert (await hosted.statistics()).pid != (await dedicated.statistics()).pid
    finally:
        await hosted.close()
        await dedicated.close()


async def test_a_slow_fn_of_one_run_blocks_neither_reads_nor_writes_of_another_on_its_host(tmp_path: Path) -> None:
    slow_name, quick_name = _names_on_one_host(2, "slowfn")
    release = tmp_path / "release"
    entered = tmp_path / "entered"

    def wait_for_release(state: Tally) -> None:  # runs in the host process
        entered.touch()
        while not release.exists():
            os.sched_yield()
        state.n += 1

    slow, quick = Orchestrator(Tally(), name=slow_name), Orchestrator(Tally(), name=quick_name)
    try:
        assert (await slow.statistics()).pid == (await quick.statistics()).pid
        pending = asyncio.ensure_future(slow.apply(wait_for_release))
        await file_appears(entered)
        for _ in range(20):
            await quick.apply(bump)
        assert (await quick.snapshot()).n == 20
        assert await slow.version() == 0  # the slow run's readers see its last commit meanwhile
        assert not pending.done()
        release.touch()
        assert await asyncio.wait_for(pending, HANG_GUARD_S) == 1
    finally:
        release.touch()
        await slow.close()
        await quick.close()


async def test_a_slow_call_sent_in_one_batch_with_quick_ones_never_holds_their_answers(tmp_path: Path) -> None:
    # Calls made in the same turn of a driver's loop travel to their host in one Ray call; the
    # slow one is answered later on its own, the quick ones as soon as they are done.
    names = _names_on_one_host(6, "batched")
    release, entered = tmp_path / "release", tmp_path / "entered"

    def wait_for_release(state: Tally) -> None:  # runs in the host process
        entered.touch()
        while not release.exists():
            os.sched_yield()
        state.n += 1

    runs = [Orchestrator(Tally(), name=n) for n in names]
    try:
        slow = asyncio.ensure_future(runs[0].apply(wait_for_release))
        quick = [asyncio.ensure_future(r.apply(bump)) for r in runs[1:]]  # the same loop turn as the slow one
        assert await asyncio.wait_for(asyncio.gather(*quick), HANG_GUARD_S) == [1] * 5
        await file_appears(entered)
        assert not slow.done() and await runs[0].version() == 0
        release.touch()
        assert await asyncio.wait_for(slow, HANG_GUARD_S) == 1
        assert [(await r.snapshot()).n for r in runs] == [1] * 6
    finally:
        release.touch()
        await asyncio.gather(*(r.close() for r in runs))


class _Unpicklable(Exception):
    def __init__(self) -> None:
        super().__init__("holds a lock")
        self.lock = threading.Lock()


async def test_an_error_in_a_batch_reaches_only_its_own_caller_as_its_own_type() -> None:
    names = _names_on_one_host(4, "batch-errors")
    runs = [Orchestrator(Tally(), name=n) for n in names]

    def refuse(state: Tally) -> None:
        raise ValueError("no thanks")

    def unpicklable(state: Tally) -> None:
        raise _Unpicklable()

    try:
        outcomes = await asyncio.gather(runs[0].apply(refuse), runs[1].apply(unpicklable), runs[2].apply(bump),
                                        runs[3].apply(bump), return_exceptions=True)
        assert isinstance(outcomes[0], ValueError) and str(outcomes[0]) == "no thanks"
        assert isinstance(outcomes[1], Exception) and "_Unpicklable" in str(outcomes[1])
        assert outcomes[2:] == [1, 1]
        assert [await r.version() for r in runs] == [0, 0, 1, 1]  # a refused apply changed nothing
    finally:
        await asyncio.gather(*(r.close() for r in runs))


async def test_unload_and_reactivate_keep_version_history_and_open_interrupts(tmp_path: Path) -> None:
    store, log = tmp_path / "runs.sqlite", tmp_path / "effects.log"
    orch = Orchestrator(AgentState(), caller=skill_registry(), name="unload-me", store=str(store))
    try:
        outcome = await Run(orch, three(str(log), approve="each"), first="planner", fallback="reviewer").run("go")
        assert outcome.status == "waiting" and len(outcome.interrupts) == 2
        before = (await orch.version(), await orch.history(0), await open_interrupts(orch), await orch.statistics())

        assert await orch.unload()
        records = {r.name: r for _, r in await asyncio.to_thread(hosted_runs)}
        assert records["unload-me"].loaded is False and records["unload-me"].version == before[0]

        after = (await orch.version(), await orch.history(0), await open_interrupts(orch), await orch.statistics())
        assert after[0] == before[0]
        assert [c.model_dump(exclude={"seq"}) for c in after[1]] == [c.model_dump(exclude={"seq"}) for c in before[1]]
        assert after[2] == before[2]
        assert after[3].epoch == before[3].epoch + 1  # a new activation, fenced apart from the old one

        for interrupt in after[2]:  # the reactivated run goes on where it waited
            await answer_interrupt(orch, interrupt.id, approve=True)
        outcome = await Run(orch, three(str(log)), first="planner", fallback="reviewer").resume()
        assert outcome.status == "complete", outcome.reason
        assert counts(log)["coordinator:planner"] == 1  # nothing before the interrupt ran again
    finally:
        await orch.close()


async def test_an_idle_durable_run_leaves_memory_on_its_own_and_comes_back_on_the_next_call(tmp_path: Path) -> None:
    orch = Orchestrator(Tally(), name="idle-leaves", store=str(tmp_path / "runs.sqlite"), unload_after_s=0.2)
    try:
        await orch.apply(bump)
        await eventually(lambda: asyncio.to_thread(hosted_runs),
                         lambda found: any(r.name == "idle-leaves" and not r.loaded for _, r in found),
                         "the idle run to be unloaded")
        assert (await orch.snapshot()).n == 1
        assert await orch.apply(bump) == 2
    finally:
        await orch.close()


async def test_a_run_without_a_store_stays_in_memory() -> None:
    orch = Orchestrator(Tally(), name="no-store-stays", unload_after_s=0.05)
    try:
        await orch.apply(bump)
        assert not await orch.unload()
        assert (await orch.snapshot()).n == 1
    finally:
        await orch.close()


async def test_a_superseded_activation_is_refused_and_the_next_call_takes_the_run_back(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    orch = Orchestrator(Tally(), name="fenced", store=str(store))
    try:
        for _ in range(3):
            await orch.apply(bump)
        epoch = (await orch.statistics()).epoch
        other = SqliteStore(store)  # another writer takes the run up (as a host of another cluster would)
        try:
            assert other.activate("fenced", holder={"host": "elsewhere", "pid": 1}) == epoch + 1
        finally:
            other.close()
        with pytest.raises(WriterFenced, match="superseded by epoch"):
            await orch.apply(bump)
        assert _journal_versions(store, "fenced") == [1, 2, 3]  # nothing of the refused write
        # The host let the stale activation go: the next call activates the run again.
        assert await orch.apply(bump) == 4
        assert (await orch.statistics()).epoch == epoch + 2
        assert (await orch.snapshot()).n == 4
    finally:
        await orch.close()


async def test_two_drivers_racing_to_activate_a_run_share_one_activation(tmp_path: Path) -> None:
    store, go = tmp_path / "runs.sqlite", tmp_path / "go"
    first = Orchestrator(Tally(), name="raced", store=str(store))
    await first.apply(bump)
    await first.close()  # stored, held by no host
    epoch_before = SqliteStore(store).activation("raced")[0]
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    address = ray.get_runtime_context().gcs_address
    drivers = [
        subprocess.Popen([sys.executable, str(REPO / "tests" / "actors" / "_host_race_driver.py"), address, str(store),
                          "raced", tag, "25", str(go)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        for tag in ("a", "b")
    ]
    go.touch()
    outputs = [await asyncio.to_thread(d.communicate, timeout=HANG_GUARD_S * 3) for d in drivers]
    assert [d.returncode for d in drivers] == [0, 0], outputs
    acks = [line.split() for out, _ in outputs for line in out.splitlines() if line.startswith("ACK")]
    done = [line.split()[1:] for out, _ in outputs for line in out.splitlines() if line.startswith("DONE")]
    assert len(acks) == 50 and len({version for _, _, version in acks}) == 50  # every write once, no version twice
    assert done[0] == done[1], f"the drivers reached different activations: {done}"
    assert int(done[0][1]) == epoch_before + 1  # one activation between them
    assert _journal_versions(store, "raced") == list(range(1, 52))
    orch = Orchestrator.attach("raced", store=str(store))
    try:
        assert (await orch.snapshot()).n == 51
    finally:
        await orch.close()


async def test_sigkill_of_the_hosts_mid_write_loses_no_acknowledged_write_across_100_runs(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    runs = [Orchestrator(Tally(), name=f"killed-{i}", store=str(store), durability="batch") for i in range(100)]
    writes = 12
    acked: dict[str, list[int]] = {r.name: [] for r in runs}
    kill_at = asyncio.Event()

    async def write(orch: Orchestrator[Tally]) -> None:
        for i in range(writes):
            acked[orch.name].append(await orch.apply(bump, request_id=f"{orch.name}-{i}"))
            if sum(map(len, acked.values())) >= 100 * writes // 3:
                kill_at.set()

    try:
        pids = {(await r.statistics()).pid for r in runs}
        writers = asyncio.gather(*(write(r) for r in runs))
        await kill_at.wait()
        for pid in pids:  # every host holding these runs, mid-write
            os.kill(pid, signal.SIGKILL)
        await asyncio.wait_for(writers, HANG_GUARD_S * 2)
        for orch in runs:
            assert acked[orch.name] == list(range(1, writes + 1)), orch.name  # every write acknowledged once, in order
            assert (await orch.snapshot()).n == writes  # none applied twice
            assert _journal_versions(store, orch.name) == list(range(1, writes + 1))
        now = {(await r.statistics()).pid for r in runs}
        assert not pids & now  # every run reactivated on a new host process
        # (the hosts holding them; other tests' hosts, e.g. of database stores, may live on)
        assert all(s.restarted for s in await asyncio.to_thread(host_statistics) if s.pid in now)
    finally:
        await asyncio.gather(*(r.close() for r in runs), return_exceptions=True)


def _stored_runs(path: Path, prefix: str) -> list[str]:
    try:
        with sqlite3.connect(path) as conn:
            return [n for (n,) in conn.execute("SELECT name FROM runs WHERE name LIKE ? ORDER BY name", (f"{prefix}-%",))]
    except sqlite3.OperationalError:  # the store's tables are not created yet
        return []


async def test_opens_in_flight_when_their_host_is_sigkilled_each_start_their_run_exactly_once(tmp_path: Path) -> None:
    # Ray sends a killed host's unanswered calls again (to its restarted process), and so
    # does the driver for the calls of a batch the host had not answered: an open whose
    # first attempt was already committed must start the run, not be refused as a taken name.
    store = tmp_path / "runs.sqlite"
    names = _names_on_one_host(201, "reopened")
    first = await Orchestrator.open(Tally(), name=names[0], store=str(store))
    pid = (await first.statistics()).pid
    opens = asyncio.gather(*(Orchestrator.open(Tally(), name=n, store=str(store)) for n in names[1:]),
                           return_exceptions=True)
    await eventually(lambda: asyncio.to_thread(_stored_runs, store, "reopened"), lambda stored: len(stored) >= 40,
                     "40 runs committed by their host")
    os.kill(pid, signal.SIGKILL)
    assert len(_stored_runs(store, "reopened")) < len(names)  # the kill came with opens still in flight
    runs = [first]
    try:
        started = await asyncio.wait_for(opens, HANG_GUARD_S * 2)
        runs += [r for r in started if isinstance(r, Orchestrator)]
        assert [r for r in started if not isinstance(r, Orchestrator)] == []
        assert _stored_runs(store, "reopened") == sorted(names)  # each run stored once
        assert [await r.apply(bump) for r in runs] == [1] * len(names)  # each at version 0 before this write
        assert (await runs[-1].statistics()).pid != pid
    finally:
        await asyncio.gather(*(r.close() for r in runs), return_exceptions=True)


async def test_a_host_runs_only_a_runs_typed_commands_never_its_housekeeping() -> None:
    # A run is reached only through the command table (actors.orchestrator._commands), which
    # has no command for the host's housekeeping: a call naming a method is not a command.
    orch = Orchestrator(Tally(), name="housekeeping")
    host = ray.get_actor(run_host_name("housekeeping"), namespace=SOLOIST_NAMESPACE)
    try:
        for method in ("abandon", "unload", "_let_store_go", "__init__"):
            with pytest.raises(ray.exceptions.RayTaskError, match="a run host takes a RunCall or an OpenRun"):
                await host.call_one.remote(("call", "housekeeping", None, method, (), {}))
            assert (await host.call_many.remote([("call", "housekeeping", None, method, (), {})]))[0][0] is False
        with pytest.raises(AttributeError):
            host.call  # noqa: B018  (no entry point takes a method's name)
        assert await orch.apply(bump) == 1  # the run is untouched
    finally:
        await orch.close()


async def test_a_closed_run_is_gone_from_its_host_and_refuses_calls(tmp_path: Path) -> None:
    orch = Orchestrator(Tally(), name="closed-on-host", store=str(tmp_path / "runs.sqlite"))
    reader = Orchestrator.attach("closed-on-host")
    await orch.close()
    assert "closed-on-host" not in {r.name for _, r in await asyncio.to_thread(hosted_runs)}
    with pytest.raises(OrchestratorClosed):
        await reader.version()


async def test_open_starts_many_durable_runs_from_one_event_loop_as_the_constructor_does(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    runs = await asyncio.gather(*(Orchestrator.open(Tally(), name=f"opened-{i}", store=str(path)) for i in range(40)))
    try:
        assert [await r.apply(bump) for r in runs] == [1] * 40
        assert all(r.hosted for r in runs)
        assert not _live_actor_names("soloist:orch:opened-")  # no actor per run
        reader = Orchestrator.attach("opened-7")
        assert (await reader.snapshot()).n == 1
        assert all(_journal_versions(path, r.name) == [1] for r in runs)  # counted in the file itself
    finally:
        await asyncio.gather(*(r.close() for r in runs))
    dedicated = await Orchestrator.open(Tally(), dedicated=True)
    try:
        assert not dedicated.hosted and await dedicated.apply(bump) == 1
    finally:
        await dedicated.close()


class LoadCountingRegistry(SkillRegistry):
    """A skill registry that appends its process id to ``ledger`` (fsynced) each time a
    process loads a copy of it: loads counted from inside the processes that do them."""

    def __init__(self, ledger: str) -> None:
        super().__init__()
        self.ledger = ledger

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        with open(self.ledger, "a", encoding="utf-8") as out:
            out.write(f"{os.getpid()}\n")
            out.flush()
            os.fsync(out.fileno())


def _loads(ledger: Path) -> list[str]:
    return ledger.read_text().split() if ledger.exists() else []


def late(inp: EchoIn) -> EchoOut:
    return EchoOut(echoed=f"late {inp.text}")


async def test_runs_started_with_one_registry_share_one_loaded_copy_per_host_until_a_skill_is_added(tmp_path: Path) -> None:
    ledger = tmp_path / "loads"
    skills = LoadCountingRegistry(str(ledger))
    skills.register("echo", late)
    runs = await asyncio.gather(*(Orchestrator.open(Tally(), caller=skills, name=f"shared-caller-{i}") for i in range(30)))
    try:
        hosts = {(await r.statistics()).pid for r in runs}
        first = _loads(ledger)
        assert sorted(first) == sorted(str(pid) for pid in hosts), "one load per host, not one per run"
        skills.register("late", late)  # what the registry serves changed: the next start sends it again
        newer = await Orchestrator.open(Tally(), caller=skills, name="shared-caller-late")
        try:
            assert len(_loads(ledger)) == len(first) + 1
            assert "late" in Orchestrator.attach("shared-caller-late").caller.names()  # the host's copy
            assert "late" not in Orchestrator.attach("shared-caller-0").caller.names()  # started before it
        finally:
            await newer.close()
    finally:
        await asyncio.gather(*(r.close() for r in runs))


async def test_open_refuses_bad_arguments_and_a_taken_name_as_the_constructor_does(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="durability must be one of"):
        await Orchestrator.open(Tally(), durability="sometimes")
    with pytest.raises(ValueError, match="unload_after_s must be"):
        await Orchestrator.open(Tally(), unload_after_s=0)
    orch = await Orchestrator.open(Tally(), name="open-taken")
    try:
        with pytest.raises(ValueError, match="already running on host"):
            await Orchestrator.open(Tally(), name="open-taken")
        assert await orch.apply(bump) == 1  # the first run is untouched
    finally:
        await orch.close()


def test_a_second_run_with_a_name_active_on_its_host_is_refused() -> None:
    orch = Orchestrator(Tally(), name="taken-name")
    try:
        with pytest.raises(ValueError, match="already running on host"):
            Orchestrator(Tally(), name="taken-name")
    finally:
        asyncio.run(orch.close())


def test_a_run_past_its_hosts_limit_is_refused_and_the_others_go_on(monkeypatch: pytest.MonkeyPatch) -> None:
    names = _names_on_one_host(4, "limited")
    held = [Orchestrator(Tally(), name=n) for n in names[:3]]
    try:
        others = len([r for h, r in hosted_runs() if h == run_host_name(names[0])])
        monkeypatch.setenv("SOLOIST_HOST_MAX_RUNS", str(others))
        with pytest.raises(RunHostFull, match=rf"holds {others:,} runs, its limit \(SOLOIST_HOST_MAX_RUNS={others}\)"):
            Orchestrator(Tally(), name=names[3])
        assert names[3] not in Orchestrator.list_live()
        assert asyncio.run(held[0].apply(bump)) == 1
    finally:
        for orch in held:
            asyncio.run(orch.close())


def test_bad_host_settings_are_refused_with_the_variable_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOLOIST_RUN_HOSTS", "zero")
    with pytest.raises(ValueError, match="SOLOIST_RUN_HOSTS='zero' is not an integer"):
        run_host_name("any")
    monkeypatch.setenv("SOLOIST_RUN_HOSTS", "0")
    with pytest.raises(ValueError, match="SOLOIST_RUN_HOSTS='0' must be >= 1"):
        run_host_name("any")


async def test_a_driver_asking_for_another_number_of_hosts_is_refused_and_the_run_keeps_its_one_writer(tmp_path: Path) -> None:
    """Run placement hashes a run's name over the cluster's hosts: a process whose
    SOLOIST_RUN_HOSTS differs would compute another host for the same run, activate it there
    and fence the owner's writes (the run then ping-pongs). It is refused instead, naming both
    counts, and the owner's writes go on under the same activation."""
    store = tmp_path / "runs.sqlite"
    owner = Orchestrator(Tally(), name="one-writer", store=str(store))
    try:
        await owner.apply(bump)
        epoch = (await owner.statistics()).epoch
        go = tmp_path / "go"
        go.touch()
        env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0", "SOLOIST_RUN_HOSTS": "7"}
        other = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(REPO / "tests" / "actors" / "_host_race_driver.py"), ray.get_runtime_context().gcs_address,
             str(store), "one-writer", "other", "3", str(go)],
            capture_output=True, text=True, env=env, timeout=HANG_GUARD_S * 3,
        )
        assert other.returncode != 0 and "ACK" not in other.stdout, other.stdout
        assert "SOLOIST_RUN_HOSTS='7' in this process, but this cluster places runs over" in other.stderr, other.stderr[-2000:]
        assert await owner.apply(bump) == 2  # not fenced
        assert (await owner.statistics()).epoch == epoch
    finally:
        await owner.close()


async def test_a_closed_run_is_not_brought_back_by_a_copy_of_its_handle_until_it_is_attached_again(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    owner = Orchestrator(Tally(), name="closed-for-good", store=str(store))
    copy = owner.delegate()
    assert await owner.apply(bump) == 1
    await owner.close()
    with pytest.raises(OrchestratorClosed, match="'closed-for-good' was closed by its owner; Orchestrator.attach"):
        await copy.apply(bump)
    assert "closed-for-good" not in {record.name for _, record in hosted_runs()}
    assert _journal_last(store, "closed-for-good") == 1
    again = Orchestrator.attach("closed-for-good", store=str(store))  # an explicit reopen
    try:
        assert await again.apply(bump) == 2
        assert await copy.apply(bump) == 3  # the run is open again: the copy reaches it
    finally:
        await again.close()


async def test_a_run_deleted_while_unloaded_leaves_its_host_and_its_name_free(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    orch = Orchestrator(Tally(), name="deleted-meanwhile", store=str(store))
    await orch.apply(bump)
    assert await orch.unload()
    deleting = SqliteStore(store)
    deleting.delete_run("deleted-meanwhile")
    deleting.close()
    with pytest.raises(LookupError, match="no stored run named 'deleted-meanwhile'"):
        await orch.apply(bump)
    assert "deleted-meanwhile" not in {record.name for _, record in hosted_runs()}
    await orch.close()  # closing a run that is gone is done
    fresh = Orchestrator(Tally(), name="deleted-meanwhile", store=str(store))  # the name is free again
    try:
        assert await fresh.apply(bump) == 1
    finally:
        await fresh.close()


def _journal_last(store: Path, run: str) -> int:
    opened = SqliteStore(store)
    try:
        checkpoint, entries = opened.load(run)
        return entries[-1].version if entries else checkpoint.version
    finally:
        opened.close()


def _held_until(release: str, entered: str, state: Tally) -> None:
    """An apply fn that stays inside until the test lets it go (a slow fn, without a clock)."""
    Path(entered).touch()
    while not os.path.exists(release):
        time.sleep(0.005)
    state.n += 1


async def test_slow_fns_of_many_runs_never_hold_back_another_runs_apply(tmp_path: Path) -> None:
    """Eight runs of one host each stay inside a slow fn; a ninth run's apply on that host is
    answered meanwhile (a pool of four fn threads held it until one of them returned)."""
    names = _names_on_one_host(9, "slow-fns")
    slow = [Orchestrator(Tally(), name=name) for name in names[:8]]
    quick = Orchestrator(Tally(), name=names[8])
    release = tmp_path / "release"
    try:
        held = [asyncio.ensure_future(run.apply(functools.partial(_held_until, str(release), str(tmp_path / f"in-{i}"))))
                for i, run in enumerate(slow)]
        for i in range(len(slow)):
            await file_appears(tmp_path / f"in-{i}")  # every slow fn is inside, each on a thread of the host
        assert await asyncio.wait_for(quick.apply(bump), HANG_GUARD_S) == 1
        assert not any(h.done() for h in held)  # answered while all eight were still inside
        release.touch()
        assert await asyncio.wait_for(asyncio.gather(*held), HANG_GUARD_S) == [1] * len(slow)
    finally:
        release.touch()
        for run in [*slow, quick]:
            await run.close()


def _open_files(pid: int) -> set[str]:
    """The files process ``pid`` has open now, read from /proc (not from the process's own account)."""
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed between listing and reading
            found.add(os.readlink(fd))
    return found


async def test_a_store_waiting_to_open_never_holds_back_other_runs_of_its_host(tmp_path: Path) -> None:
    """Opening a new store file waits for the file's write gate (held here by the test, as by
    another writer of the file); meanwhile another run of the same host is answered (the host
    opened stores on its event loop: every call waited up to the gate's 10 s)."""
    quick_name, gated_name = _names_on_one_host(2, "gated")
    quick = Orchestrator(Tally(), name=quick_name)
    store = tmp_path / "gated.sqlite"
    gate_path = tmp_path / "gated.sqlite.locks" / "write.gate"
    gate_path.parent.mkdir()
    gate = os.open(gate_path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(gate, fcntl.LOCK_EX)
    opening: asyncio.Future[Orchestrator] | None = None
    try:
        host_pid = (await quick.statistics()).pid
        opening = asyncio.ensure_future(asyncio.to_thread(Orchestrator, Tally(), name=gated_name, store=str(store)))
        await eventually(lambda: asyncio.to_thread(_open_files, host_pid), lambda files: str(gate_path) in files,
                         "the host to open the gated store")
        assert await asyncio.wait_for(quick.apply(bump), HANG_GUARD_S) == 1
        assert not opening.done()  # answered while the store still waited for its gate
    finally:
        fcntl.flock(gate, fcntl.LOCK_UN)
        os.close(gate)
        if opening is not None:
            gated = await asyncio.wait_for(opening, HANG_GUARD_S)
            assert await gated.apply(bump) == 1
            await gated.close()
        await quick.close()


_DRIVER_THAT_EXITS = """
import asyncio, sys
from pydantic import BaseModel
from actors import Orchestrator
from cluster import connect


class Tally(BaseModel):
    n: int = 0


def bump(state):
    state.n += 1


async def main(address, store, name):
    connect(address=address, namespace="soloist-tests")
    orch = Orchestrator(Tally(), name=name, store=store)  # not detached: closed when this driver exits
    await orch.apply(bump)
    print("HOST", (await orch.statistics()).pid, flush=True)
    sys.stdin.readline()  # the test restarts the host meanwhile
    print("AFTER", await orch.apply(bump), flush=True)


asyncio.run(main(*sys.argv[1:4]))
"""


async def test_a_run_taken_up_again_after_its_host_restarted_is_still_closed_when_its_driver_exits(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER_THAT_EXITS, ray.get_runtime_context().gcs_address, str(store),
                               "orphaned"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, env=env)
    try:
        assert driver.stdout is not None and driver.stdin is not None
        line = await asyncio.wait_for(asyncio.to_thread(_line_starting, driver.stdout, "HOST "), HANG_GUARD_S)
        host_pid = int(line.split()[1])
        os.kill(host_pid, signal.SIGKILL)
        await process_gone(host_pid)  # Ray restarts the host: it holds nothing
        driver.stdin.write("go\n")
        driver.stdin.flush()
        line = await asyncio.wait_for(asyncio.to_thread(_line_starting, driver.stdout, "AFTER "), HANG_GUARD_S)
        assert line.split() == ["AFTER", "2"], line  # taken up again from the store on the restarted host
        assert await asyncio.to_thread(driver.wait, HANG_GUARD_S) == 0
    finally:
        driver.kill()

    def closed_by_its_host() -> bool:
        opened = SqliteStore(store)
        try:
            info = opened.get_run("orphaned")
            marked = info is not None and bool(info.metadata.get("closed"))
        finally:
            opened.close()
        return marked and "orphaned" not in {record.name for _, record in hosted_runs()}

    await eventually(lambda: asyncio.to_thread(closed_by_its_host), bool, "the host closing the exited driver's run")


_DRIVER_THAT_NEVER_CALLS_AGAIN = """
import asyncio, sys
from pydantic import BaseModel
from actors import Orchestrator
from cluster import connect


class Tally(BaseModel):
    n: int = 0


def bump(state):
    state.n += 1


async def main(address, store, durable, in_memory, scope):
    connect(address=address, namespace="soloist-tests")
    kept = Orchestrator(Tally(), name=durable, store=store, semaphore_scope=scope)  # neither is detached
    lost = Orchestrator(Tally(), name=in_memory, semaphore_scope=scope + "-memory")
    await kept.apply(bump)
    await lost.apply(bump)
    await kept.join_semaphore()  # as a first handoff does
    await lost.join_semaphore()
    print("HOST", (await kept.statistics()).pid, (await lost.statistics()).pid, flush=True)
    sys.stdin.readline()  # the test restarts the host meanwhile; this driver then exits without a call


asyncio.run(main(*sys.argv[1:6]))
"""


async def test_runs_of_a_driver_that_exits_without_calling_their_restarted_host_again_are_closed(tmp_path: Path) -> None:
    """Issue 43, defect 7: with its host SIGKILLed and restarted by Ray, a run whose driver then
    exited without another call stayed open on the host for ever, in its semaphore scope too."""
    store = tmp_path / "runs.sqlite"
    durable, in_memory = _names_on_one_host(2, "never-again")
    scope = f"never-again-{os.getpid()}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER_THAT_NEVER_CALLS_AGAIN, ray.get_runtime_context().gcs_address,
                               str(store), durable, in_memory, scope],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert driver.stdout is not None and driver.stdin is not None
        line = await asyncio.wait_for(asyncio.to_thread(_line_starting, driver.stdout, "HOST "), HANG_GUARD_S)
        host_pid, other_pid = map(int, line.split()[1:])
        assert host_pid == other_pid, line  # both runs on one host
        for joined in (scope, scope + "-memory"):
            await ClusterSemaphore.existing_async(joined)  # both scopes are served while their runs use them
        assert _host_records_naming(durable, in_memory) == {durable, in_memory}  # kept outside the host's memory
        os.kill(host_pid, signal.SIGKILL)
        await process_gone(host_pid)
        host = run_host_name(durable, store=str(store))
        await eventually(lambda: asyncio.to_thread(host_statistics),
                         lambda stats: any(s.name == host and s.restarted for s in stats), "Ray restarting the host")
        driver.stdin.write("exit\n")
        driver.stdin.flush()
        assert await asyncio.to_thread(driver.wait, HANG_GUARD_S) == 0
    finally:
        driver.kill()

    def closed_everywhere() -> bool:
        opened = SqliteStore(store)
        try:
            info = opened.get_run(durable)
            marked = info is not None and bool(info.metadata.get("closed"))
        finally:
            opened.close()
        held = {record.name for _, record in hosted_runs()}
        return marked and durable not in held and in_memory not in held

    await eventually(lambda: asyncio.to_thread(closed_everywhere), bool, "the restarted host closing the exited driver's runs")
    for left in (scope, scope + "-memory"):
        with pytest.raises(SemaphoreUnavailable):  # the runs left their scopes: no service serves them any more
            await ClusterSemaphore.existing_async(left)
    assert _host_records_naming(durable, in_memory) == set()  # the records go with the runs


def _host_records_naming(*runs: str) -> set[str]:
    """Which of ``runs`` have a record in the hosts' namespace of Ray's key-value store."""
    keys = _internal_kv_list(b"", namespace=_HOST_RECORDS)
    return {run for run in runs if any(key.decode().endswith("/" + run) for key in keys)}


def _line_starting(stream: Any, prefix: str) -> str:
    """The driver's next line starting with ``prefix`` (Ray forwards its workers' warnings to
    the driver's stdout too); empty at the end of the stream."""
    while line := stream.readline():
        if line.startswith(prefix):
            return str(line)
    return ""
