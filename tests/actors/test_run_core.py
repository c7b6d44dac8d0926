"""One run's writer in-process (``RunCore``, no Ray): activation order, fencing, durability.

Two ``RunCore`` objects on one store file behave as two run hosts of one cluster: the second
takes the run over from the first while the first still lives and writes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import BaseModel

from actors import OrchestratorClosed, RunCore
from cluster.storage import MemoryStore, SqliteStore, WriterFenced
from coordinators import AgentState, TransitionBatch


class Counter(BaseModel):
    n: int = 0


def _bump(state: Counter) -> None:
    state.n += 1


async def test_a_run_core_applies_reads_and_is_taken_up_again_from_its_store(tmp_path: Path):
    store = tmp_path / "runs.sqlite"
    async with RunCore(Counter(), name="counting", store=store) as core:
        for _ in range(3):
            await core.apply(_bump)
        assert await core.version() == 3
        snapshot = await core.snapshot()
        snapshot.n = 100  # its own copy
        assert (await core.snapshot()).n == 3
    async with RunCore.resume("counting", store=store) as again:
        assert await again.version() == 3
        assert (await again.snapshot()).n == 3
        assert await again.apply(_bump) == 4


async def test_a_run_core_applies_batches_through_reduce(tmp_path: Path):
    async with RunCore(AgentState(), store=tmp_path / "runs.sqlite") as core:
        version = await core.apply_batch(TransitionBatch().add_message({"role": "user", "content": "hi"}).update_state("k", 1))
        context = await core.context()
        assert version == 1 and context.message_count == 1 and context.get_state("k") == 1


async def test_taking_a_run_over_from_a_live_writer_serves_every_version_it_acknowledged(tmp_path: Path):
    """The newest activation reads the run only once its fencing epoch is committed: every
    version the old writer was acknowledged is in what the new one serves, and the new one's
    first write follows them (no JournalGap). Reading before the epoch let the old writer
    commit versions the new activation never saw (15 of 20 trials lost up to 20)."""
    store = tmp_path / "runs.sqlite"
    for trial in range(20):
        name = f"taken-over-{trial}"
        old = RunCore(Counter(), name=name, store=store)
        acknowledged: list[int] = []
        fenced = asyncio.Event()
        writing = asyncio.Event()

        async def keep_writing() -> None:
            while True:
                try:
                    acknowledged.append(await old.apply(_bump))
                except WriterFenced:
                    fenced.set()
                    return
                writing.set()

        writer = asyncio.create_task(keep_writing())
        await writing.wait()
        new = await asyncio.to_thread(RunCore.resume, name, store=store)  # a sync constructor: the old one goes on meanwhile
        try:
            await asyncio.wait_for(fenced.wait(), timeout=60)  # a bound on a hang, not a timing assumption
            await writer
            served = await new.version()
            assert served == max(acknowledged), f"trial {trial}: served {served}, acknowledged up to {max(acknowledged)}"
            assert (await new.snapshot()).n == served
            assert await new.apply(_bump) == served + 1
        finally:
            await new.close()
            await old.close()


async def test_durability_is_stored_with_the_run_and_reopened_as_it_was(tmp_path: Path):
    store = tmp_path / "runs.sqlite"
    async with RunCore(Counter(), name="batched", store=store, durability="batch") as core:
        await core.apply(_bump)
    async with RunCore.resume("batched", store=store) as again:
        assert (await again.statistics()).durability == "batch"
    async with RunCore.resume("batched", store=store, durability="sync") as overridden:
        assert (await overridden.statistics()).durability == "sync"
    async with RunCore.resume("batched", store=store) as still:  # an override is not stored
        assert (await still.statistics()).durability == "batch"


@pytest.mark.parametrize("bad", ["fast", "", None, 1])
def test_a_bad_durability_is_refused_naming_the_value_and_nothing_is_stored(tmp_path: Path, bad: object):
    store = tmp_path / "runs.sqlite"
    with pytest.raises(ValueError, match=r"durability must be one of 'sync', 'batch', 'exit', got"):
        RunCore(Counter(), name="never", store=store, durability=bad)  # type: ignore[arg-type]  # the bad value is the test
    assert not store.exists() or SqliteStore(store).get_run("never") is None


def test_resuming_a_run_the_store_does_not_hold_is_a_lookup_error_naming_it(tmp_path: Path):
    store = tmp_path / "runs.sqlite"
    SqliteStore(store).close()
    with pytest.raises(LookupError, match="no stored run named 'absent'"):
        RunCore.resume("absent", store=store)


# -- the activation's lifecycle ----------------------------------------------------------


async def test_a_new_run_is_claimed_created_in_its_epochs_commit_then_serves_and_closes(tmp_path: Path):
    core = RunCore(Counter(), name="lifecycle-new", store=tmp_path / "runs.sqlite")
    assert core.stages == ("claimed", "replayed", "fenced", "serving") and core.stage == "serving"
    await core.apply(_bump)
    await core.close()
    assert core.stage == "closed" and core.stages[-2:] == ("unloading", "closed")


async def test_a_stored_run_is_fenced_before_it_is_replayed(tmp_path: Path):
    store = tmp_path / "runs.sqlite"
    async with RunCore(Counter(), name="lifecycle-stored", store=store) as core:
        await core.apply(_bump)
    async with RunCore.resume("lifecycle-stored", store=store) as again:
        assert again.stages == ("claimed", "fenced", "replayed", "serving")
        assert await again.version() == 1


async def test_a_run_without_a_store_serves_at_once_and_a_memory_store_is_never_fenced():
    async with RunCore(Counter()) as bare:
        assert bare.stages == ("serving",)
    async with RunCore(Counter(), store=MemoryStore()) as in_memory:
        assert in_memory.stages == ("claimed", "replayed", "serving")


async def test_a_superseded_activation_closes_without_writing_and_the_newer_one_serves(tmp_path: Path):
    store = tmp_path / "runs.sqlite"
    old = RunCore(Counter(), name="lifecycle-fenced", store=store)
    await old.apply(_bump)
    new = RunCore.resume("lifecycle-fenced", store=store)
    try:
        with pytest.raises(WriterFenced):
            await old.apply(_bump)
        await old.close()  # its final checkpoint is refused: it stops all the same
        assert old.stage == "closed" and new.stage == "serving"
        assert await new.apply(_bump) == 2
    finally:
        await new.close()


async def test_a_closed_activation_refuses_writes(tmp_path: Path):
    core = RunCore(Counter(), name="lifecycle-closed", store=tmp_path / "runs.sqlite")
    await core.close()
    with pytest.raises(OrchestratorClosed):
        await core.apply(_bump)
