"""History from the journal, forks equal to the state at a version, retention windows."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from actors import HistoryCompacted, Orchestrator
from cluster.storage import SqliteStore, replay
from coordinators import AgentState, Message, TransitionBatch

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class Tally(BaseModel):
    count: int = 0
    seen: list[int] = []


def _bump(n: int):
    def fn(state: Tally) -> None:
        state.count += n
        state.seen.append(n)

    return fn


async def test_history_lists_every_committed_version_with_its_transitions_or_diff(tmp_path: Path) -> None:
    orch = Orchestrator(AgentState(), store=str(tmp_path / "h.sqlite"))
    try:
        await orch.apply_batch(TransitionBatch().update_state("a", 1))
        await orch.apply(lambda s: s.conversation_state.update(b=2))
        await orch.apply_batch(TransitionBatch().update_stage("exploring"), request_id="stage-1")
        changes = await orch.history()
        assert [(c.version, c.kind) for c in changes] == [(1, "batch"), (2, "fn"), (3, "batch")]
        assert changes[0].transitions[0].data["key"] == "a"
        assert changes[1].diff and changes[1].transitions is None
        assert changes[2].request_id == "stage-1"
        assert [c.version for c in await orch.history(since=1, until=2)] == [2]
        with pytest.raises(ValueError, match="is at version 3"):
            await orch.history(until=4)
    finally:
        await orch.close()


async def test_a_fork_equals_the_state_at_its_version_and_the_branches_stay_independent(tmp_path: Path) -> None:
    store = str(tmp_path / "f.sqlite")
    orch = Orchestrator(Tally(), name="fork-origin", store=store, checkpoint_every=3)
    dumps = {0: Tally().model_dump_json()}
    try:
        for n in range(1, 9):
            version = await orch.apply(_bump(n))
            dumps[version] = (await orch.snapshot()).model_dump_json()
        fork = await orch.fork("fork-branch", at_version=5)
        try:
            assert (await fork.snapshot()).model_dump_json() == dumps[5]
            assert await fork.version() == 0
            await fork.apply(_bump(100))
            await orch.apply(_bump(1000))
            assert (await orch.snapshot()).seen == [1, 2, 3, 4, 5, 6, 7, 8, 1000]
            assert (await fork.snapshot()).seen == [1, 2, 3, 4, 5, 100]
            assert (await orch.state_at(5)).model_dump_json() == dumps[5]
            assert [c.version for c in await orch.history()] == list(range(1, 10))
        finally:
            await fork.close()
        reopened = Orchestrator.attach("fork-branch", store=store)
        try:
            assert (await reopened.snapshot()).seen == [1, 2, 3, 4, 5, 100]
        finally:
            await reopened.close()
    finally:
        await orch.close()


async def test_history_across_a_compaction_boundary_names_the_earliest_kept_version(tmp_path: Path) -> None:
    orch = Orchestrator(Tally(), store=str(tmp_path / "c.sqlite"), checkpoint_every=10, keep_versions=15)
    dumps: dict[int, str] = {}
    try:
        for n in range(1, 41):
            version = await orch.apply(_bump(n))
            dumps[version] = (await orch.snapshot()).model_dump_json()
        await orch.close()
        orch = Orchestrator.attach(orch.name, store=str(tmp_path / "c.sqlite"))
        # Checkpoints at 10, 20, 30, 40; at 40 the window keeps >= 25, so from checkpoint 20 on.
        with pytest.raises(HistoryCompacted, match="earliest version still kept is 20") as caught:
            await orch.history(since=5)
        assert caught.value.earliest == 20
        kept = await orch.history(since=20)
        assert [c.version for c in kept] == list(range(21, 41))
        assert (await orch.state_at(22)).model_dump_json() == dumps[22]
        with pytest.raises(HistoryCompacted):
            await orch.fork("too-old", at_version=19)
    finally:
        await orch.close()


async def test_history_of_a_run_without_a_store_comes_from_memory() -> None:
    orch = Orchestrator(Tally())
    try:
        for n in range(3):
            await orch.apply(_bump(n))
        assert [c.version for c in await orch.history(since=1)] == [2, 3]
        fork = await orch.fork("memory-fork", at_version=3)
        try:
            assert (await fork.snapshot()) == (await orch.snapshot())
        finally:
            await fork.close()
        with pytest.raises(HistoryCompacted, match="earliest version still kept is 3"):
            await orch.fork("too-old-memory", at_version=1)
    finally:
        await orch.close()


async def test_the_storage_replay_rebuilds_what_the_orchestrator_committed_at_every_version(tmp_path: Path) -> None:
    # One replay of the journal: the storage layer's ``replay`` (used by the runs page) on a
    # checkpoint and the entries after it gives, at every version, the state the orchestrator
    # committed, its ``state_at`` and a fork at that version, for batches and diffs alike.
    path = str(tmp_path / "r.sqlite")
    orch = Orchestrator(AgentState(), name="replayed", store=path, checkpoint_every=3)
    committed = {0: AgentState().model_dump_json()}
    try:
        for n in range(1, 11):
            if n % 2:
                version = await orch.apply_batch(TransitionBatch().update_state(f"k{n}", n).add_message(Message(role="user", content=f"m{n}")))
            else:
                version = await orch.apply(lambda s, n=n: s.conversation_state.update({f"f{n}": [n, {"x": n}]}))
            committed[version] = (await orch.snapshot()).model_dump_json()
        assert sorted(committed) == list(range(11))
        from_orchestrator = {v: (await orch.state_at(v)).model_dump_json() for v in committed}
        fork = await orch.fork("replayed-fork", at_version=7)
        try:
            forked_at_7 = (await fork.snapshot()).model_dump_json()
        finally:
            await fork.close()
    finally:
        await orch.close()
    assert from_orchestrator == committed and forked_at_7 == committed[7]

    store = SqliteStore(path)
    try:
        starts = set()
        for version, expected in committed.items():
            checkpoint, entries = store.load_at("replayed", version)
            starts.add(checkpoint.version)
            assert replay(checkpoint, entries, AgentState, run="replayed", path=path).model_dump_json() == expected
        checkpoint, entries = store.load("replayed")
        assert replay(checkpoint, entries, AgentState, run="replayed", path=path).model_dump_json() == committed[10]
    finally:
        store.close()
    assert len(starts) > 1  # replays began at later checkpoints too, not only at version 0
