"""Durable orchestrator: exactly-once request ids, attach, exit durability, checkpoints; the same
on a PostgreSQL store (a URL is a store like a path, its password never reported)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel

from actors import Orchestrator, run_host_name
from cluster.storage import PostgresStore, SqliteStore, redact
from coordinators import AgentState, TransitionBatch
from tests._postgres import USER_WITH_PASSWORD, PostgresServer
from tests._waits import eventually

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class Counter(BaseModel):
    count: int = 0
    log: list[str] = []


def inc(state: Counter) -> None:
    state.count += 1


def _stored(path: Path, run: str) -> tuple[int, int, int]:
    """(checkpoint version, first journal version or 0, last version) as stored in the file."""
    store = SqliteStore(path)
    try:
        checkpoint, entries = store.load(run)
        return checkpoint.version, (entries[0].version if entries else 0), (entries[-1].version if entries else checkpoint.version)
    finally:
        store.close()


async def _kill_worker(orch: Orchestrator) -> None:
    """SIGKILL the orchestrator's worker process (Ray restarts the actor)."""
    os.kill((await orch.statistics()).pid, signal.SIGKILL)


async def test_retried_request_id_returns_recorded_version_without_applying_again(tmp_path: Path) -> None:
    orch = Orchestrator(Counter(), store=tmp_path / "s.db")
    try:
        first = await orch.apply(inc, request_id="req-a")
        await orch.apply(inc)
        assert await orch.apply(inc, request_id="req-a") == first
        batch_orch_version = await orch.version()
        assert (await orch.snapshot()).count == 2 and batch_orch_version == 2
        assert (await orch.statistics()).duplicate_requests == 1
    finally:
        await orch.close()


async def test_retried_batch_request_id_is_exactly_once_in_memory_only_runs_too() -> None:
    orch = Orchestrator(AgentState())
    try:
        batch = TransitionBatch().update_state("k", 1)
        v = await orch.apply_batch(batch, request_id="b-1")
        assert await orch.apply_batch(TransitionBatch().update_state("k", 2), request_id="b-1") == v
        assert (await orch.context()).get_state("k") == 1 and await orch.version() == 1
    finally:
        await orch.close()


async def test_request_id_must_be_a_non_empty_string() -> None:
    orch = Orchestrator(Counter())
    try:
        with pytest.raises(ValueError, match="request_id must be a non-empty string"):
            await orch.apply(inc, request_id="  ")
    finally:
        await orch.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
@pytest.mark.parametrize("checkpoint_every", [0, 3])
async def test_retried_request_id_is_found_in_the_store_after_close_and_attach(
    tmp_path: Path, checkpoint_every: int, kind: str, request: pytest.FixtureRequest
) -> None:
    path = tmp_path / "s.db" if kind == "sqlite" else request.getfixturevalue("pg_url")
    name = f"ids-{checkpoint_every}-{kind}"
    orch = Orchestrator(Counter(), name=name, store=path, checkpoint_every=checkpoint_every)
    recorded = {f"r{i}": await orch.apply(inc, request_id=f"r{i}") for i in range(8)}
    await orch.close()
    # With checkpoints the early ids were compacted out of the journal; the store still knows
    # them, and the run taken up again holds them all in memory.
    again = Orchestrator.attach(name, store=path)
    try:
        assert [await again.apply(inc, request_id=rid) for rid in recorded] == list(recorded.values())
        assert (await again.snapshot()).count == 8 and await again.version() == 8
    finally:
        await again.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_retried_request_id_is_found_after_a_crash_restart(tmp_path: Path, kind: str, request: pytest.FixtureRequest) -> None:
    store = tmp_path / "s.db" if kind == "sqlite" else request.getfixturevalue("pg_url")
    orch = Orchestrator(Counter(), name=f"crash-ids-{kind}", store=store, checkpoint_every=0)
    try:
        v = await orch.apply(inc, request_id="before-crash")
        await _kill_worker(orch)
        assert await orch.apply(inc, request_id="before-crash") == v  # waits out the restart
        stats = await orch.statistics()
        assert stats.restarted and stats.duplicate_requests == 1
        assert (await orch.snapshot()).count == 1
    finally:
        await orch.close()


async def test_a_closed_durable_run_can_be_attached_again_and_resumes_at_its_version(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    orch = Orchestrator(Counter(), name="reopen", store=path)
    for word in "abc":
        await orch.apply(lambda s, w=word: s.log.append(w))
    await orch.close()
    for round_ in range(2):
        again = Orchestrator.attach("reopen", store=path)
        assert await again.version() == 3 + round_
        assert not again.read_only
        await again.apply(inc)
        await again.close()
    final = Orchestrator.attach("reopen", store=path)
    try:
        assert (await final.snapshot()) == Counter(count=2, log=["a", "b", "c"])
    finally:
        await final.close()


def test_a_new_driver_process_attaches_to_a_persisted_run_and_resumes(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        import ray
        from actors import Orchestrator
        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
        async def main():
            orch = Orchestrator.attach("handover", store={str(path)!r})
            print("VERSION", await orch.version(), (await orch.snapshot()).count)
            print("RESEND", await orch.apply(lambda s: setattr(s, "count", s.count + 100), request_id="first-driver"))
            print("NEW", await orch.apply(lambda s: setattr(s, "count", s.count + 1), request_id="second-driver"))
            await orch.close()
        asyncio.run(main())
        ray.shutdown()
        """
    )

    async def first_driver() -> None:
        orch = Orchestrator(Counter(), name="handover", store=path)
        for i in range(4):
            await orch.apply(inc, request_id="first-driver" if i == 3 else None)
        await orch.close()

    import asyncio

    asyncio.run(first_driver())
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.split(" ", 1)[0] in {"VERSION", "RESEND", "NEW"})
    assert lines == {"VERSION": "4 4", "RESEND": "4", "NEW": "5"}
    assert _stored(path, "handover")[2] == 5


async def test_exit_durability_writes_nothing_until_close_then_everything(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    orch = Orchestrator(Counter(), name="exit-run", store=path, durability="exit", checkpoint_every=5)
    for i in range(20):
        await orch.apply(inc, request_id=f"e{i}")
    assert await orch.apply(inc, request_id="e7") == 8  # exactly-once also from the in-memory journal
    assert _stored(path, "exit-run") == (0, 0, 0)  # only the run and its version-0 checkpoint
    await orch.close()
    assert _stored(path, "exit-run")[2] == 20
    again = Orchestrator.attach("exit-run", store=path, durability="exit")
    try:
        assert await again.version() == 20 and (await again.snapshot()).count == 20
        assert await again.apply(inc, request_id="e3") == 4
    finally:
        await again.close()


async def test_checkpoints_compact_the_journal_and_recovery_loads_checkpoint_plus_tail(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    orch = Orchestrator(Counter(), name="ckpt", store=path, checkpoint_every=10, keep_versions=1)
    try:
        for i in range(35):
            await orch.apply(lambda s, i=i: s.log.append(str(i)))
        # Checkpoints run in the background after a commit; wait for the one covering version 30.
        await eventually(lambda: asyncio.to_thread(_stored, path, "ckpt"), lambda stored: stored[0] >= 30,
                         "the checkpoint of version 30")
        checkpoint, first, last = _stored(path, "ckpt")
        assert (checkpoint, first, last) == (30, 31, 35)
        store = SqliteStore(path)
        try:
            # keep_versions=1: at the checkpoint of version 30 the oldest
            # version to keep was 29, rebuilt from checkpoint 20 plus its tail: rows 21..35 remain.
            stats = store.statistics()
            assert (stats.journal_rows, stats.checkpoints) == (15, 2)
        finally:
            store.close()
        await _kill_worker(orch)
        assert await orch.version() == 35
        assert (await orch.snapshot()).log == [str(i) for i in range(35)]
        assert (await orch.statistics()).restarted
    finally:
        await orch.close()


# -- on a PostgreSQL store ----------------------------------------------------------------


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> str:
    """A fresh schema, reached as a role that logs in with a password."""
    user, password = USER_WITH_PASSWORD
    return postgres_server.fresh_url().replace("postgresql://postgres@", f"postgresql://{user}:{password}@")


async def test_a_run_on_postgres_is_closed_attached_again_and_applies_each_request_once(pg_url: str) -> None:
    orch = Orchestrator(Counter(), name="pg-ids", store=pg_url, checkpoint_every=3)
    recorded = {f"r{i}": await orch.apply(inc, request_id=f"r{i}") for i in range(7)}
    stats = await orch.statistics()
    assert stats.store == redact(pg_url) and USER_WITH_PASSWORD[1] not in stats.model_dump_json()
    await orch.close()
    again = Orchestrator.attach("pg-ids", store=pg_url)
    try:
        assert [await again.apply(inc, request_id=rid) for rid in recorded] == list(recorded.values())
        assert (await again.snapshot()).count == 7 and await again.version() == 7
    finally:
        await again.close()
    store = PostgresStore(pg_url)
    try:
        checkpoint, tail = store.load("pg-ids")
        assert checkpoint.version + len(tail) == 7 and store.find_request("pg-ids", "r0") == 1
    finally:
        store.close()


async def test_a_run_on_postgres_gets_a_movable_host_and_a_file_run_keeps_its_node_bound_one(pg_url: str, tmp_path: Path) -> None:
    on_db = Orchestrator(Counter(), name="placed-db", store=pg_url)
    on_file = Orchestrator(Counter(), name="placed-file", store=str(tmp_path / "runs.sqlite"))
    try:
        assert run_host_name("placed-db", store=pg_url).startswith("soloist:host:db:")
        assert (await on_db.statistics()).host == run_host_name("placed-db", store=pg_url)
        assert (await on_file.statistics()).host == run_host_name("placed-file") == run_host_name(
            "placed-file", store=str(tmp_path / "runs.sqlite"))
        assert not run_host_name("placed-file").startswith("soloist:host:db:")
        reader = Orchestrator.attach("placed-db")  # found without its store, on its movable host
        assert await on_db.apply(inc) == 1 and await reader.version() == 1
        assert (await on_db.statistics()).node == (await on_file.statistics()).node  # both prefer the creator's node
    finally:
        await on_db.close()
        await on_file.close()


async def test_history_and_fork_read_and_write_a_postgres_store(pg_url: str) -> None:
    orch = Orchestrator(Counter(), name="pg-history", store=pg_url)
    try:
        for word in "abc":
            await orch.apply(lambda s, w=word: s.log.append(w))
        assert [c.version for c in await orch.history(0)] == [1, 2, 3]
        fork = await orch.fork("pg-fork", at_version=2, store=pg_url)
        try:
            assert (await fork.snapshot()).log == ["a", "b"]
        finally:
            await fork.close()
    finally:
        await orch.close()


@pytest.mark.parametrize("dedicated", [False, True], ids=["hosted", "dedicated"])
async def test_attach_reopens_a_run_with_the_durability_it_was_created_with(tmp_path: Path, dedicated: bool) -> None:
    store = tmp_path / "s.db"
    name = f"batched-{'dedicated' if dedicated else 'hosted'}"
    orch = Orchestrator(Counter(), name=name, store=store, durability="batch", dedicated=dedicated)
    await orch.apply(inc)
    await orch.close()
    again = Orchestrator.attach(name, store=store)
    try:
        assert (await again.statistics()).durability == "batch"
        assert await again.apply(inc) == 2
    finally:
        await again.close()
    with pytest.raises(ValueError, match="durability must be one of 'sync', 'batch', 'exit', got 'fast'"):
        Orchestrator.attach(name, store=store, durability="fast")
