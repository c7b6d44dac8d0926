"""The single-writer orchestrator actor: serialised, atomic, validated writes; consistent reads."""

from __future__ import annotations

import asyncio
import pickle

import pytest
import ray
from pydantic import BaseModel, ValidationError

from actors import Change, Orchestrator, VersionConflict, WriteRefused
from actors import OrchestratorNotFound
from coordinators import AgentState, ContextSnapshot, TransitionBatch, TransitionError
from tests._waits import HANG_GUARD_S, file_appears, wait_for_file

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class Counter(BaseModel):
    count: int = 0
    log: list[str] = []
    nested: dict[str, list[int]] = {}


class Boom(Exception):
    """A user exception type that must reach the caller unchanged."""


@pytest.fixture
async def counter():
    orch = Orchestrator(Counter())
    yield orch
    await orch.close()


def test_constructor_rejects_a_state_that_is_not_a_pydantic_model():
    with pytest.raises(TypeError, match="pydantic model instance"):
        Orchestrator({"count": 0})


def test_constructor_rejects_an_unknown_durability_mode():
    with pytest.raises(ValueError, match="durability must be one of"):
        Orchestrator(Counter(), durability="eventually")


async def test_snapshot_returns_a_deep_copy_of_the_same_type(counter):
    await counter.apply(lambda s: s.log.append("a"))
    snap = await counter.snapshot()
    assert isinstance(snap, Counter) and snap.log == ["a"]
    snap.log.append("mutated locally")
    assert (await counter.snapshot()).log == ["a"]
    assert await counter.version() == 1


async def test_apply_none_is_an_error(counter):
    with pytest.raises(TypeError, match=r"apply\(None\)"):
        await counter.apply(None)


async def test_apply_returns_consecutive_versions_and_accepts_closures(counter):
    step = 5

    def add(s: Counter) -> None:
        s.count += step

    assert [await counter.apply(add) for _ in range(3)] == [1, 2, 3]
    assert (await counter.snapshot()).count == 15


async def test_apply_accepts_a_function_returning_a_new_state(counter):
    await counter.apply(lambda s: Counter(count=41))
    assert (await counter.snapshot()).count == 41


async def test_apply_rolls_back_when_fn_raises_after_partial_mutation(counter):
    await counter.apply(lambda s: s.nested.setdefault("a", []).append(1))
    before = (await counter.snapshot()).model_dump_json()

    def half_then_fail(s: Counter) -> None:
        s.count = 99
        s.nested["a"].append(2)
        s.log.append("partial")
        raise Boom("stopped half way")

    with pytest.raises(Boom, match="stopped half way"):
        await counter.apply(half_then_fail)
    assert (await counter.snapshot()).model_dump_json() == before
    assert await counter.version() == 1


async def test_apply_rolls_back_when_the_result_fails_validation(counter):
    def wrong_type(s: Counter) -> None:
        s.count = "not a number"  # type: ignore[assignment]

    with pytest.raises(ValidationError):
        await counter.apply(wrong_type)
    assert (await counter.snapshot()).count == 0
    assert await counter.version() == 0


async def test_snapshot_taken_while_a_slow_fn_runs_returns_the_previous_version(counter, tmp_path):
    await counter.apply(lambda s: setattr(s, "count", 1))
    started, release = tmp_path / "started", tmp_path / "release"

    def slow(s: Counter) -> None:
        started.touch()  # the write is under way ...
        wait_for_file(release)  # ... and stays so until the test has read
        s.count = 2

    write = asyncio.ensure_future(counter.apply(slow))
    await file_appears(started)
    snap = await counter.snapshot()
    version = await counter.version()
    assert not write.done()
    assert (snap.count, version) == (1, 1), "the read did not return the version before the running write"
    release.touch()
    assert await write == 2
    assert (await counter.snapshot()).count == 2


@ray.remote(num_cpus=0.25)
def _increment_many(orch: Orchestrator, n: int, ready: str, go: str) -> list[int]:
    """``n`` applies, one after another, once every writer has started (``go`` appears)."""
    from pathlib import Path

    Path(ready).touch()
    wait_for_file(Path(go))

    async def run() -> list[int]:
        return [await orch.apply(_plus_one) for _ in range(n)]

    return asyncio.run(run())


def _plus_one(s: Counter) -> None:
    s.count += 1


#: Applies per writer task. The eight tasks start writing together (each waits for the
#: others' processes to be up), so their sequential applies interleave from the first write
#: to the last; a lost or doubled write shows in a few hundred each. (Sustained load, sixteen
#: writers mixing apply and compare-and-set, is tests/reliability/test_load.py's subject.)
_APPLIES_PER_TASK = 250


async def test_concurrent_writers_from_eight_tasks_lose_nothing_and_leave_no_version_gap(counter, tmp_path):
    total = 8 * _APPLIES_PER_TASK
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{i}" for i in range(8)]
    refs = [_increment_many.remote(counter.delegate(), _APPLIES_PER_TASK, str(path), str(go)) for path in ready]
    for path in ready:
        await file_appears(path)
    go.touch()
    versions = [v for vs in await asyncio.gather(*refs) for v in vs]
    assert sorted(versions) == list(range(1, total + 1))
    assert (await counter.snapshot()).count == total
    assert await counter.version() == total


async def test_subscribe_yields_every_change_in_version_order(counter):
    seen: list[Change] = []
    following = asyncio.Event()

    async def follow() -> None:
        async for change in counter.subscribe(since=0):
            seen.append(change)
            following.set()
            if change.version == 20:
                return

    follower = asyncio.ensure_future(follow())
    await counter.apply(_plus_one)
    await asyncio.wait_for(following.wait(), HANG_GUARD_S)  # the follower is live: versions 2..20 reach it as they commit
    await asyncio.gather(*(counter.apply(_plus_one) for _ in range(19)))
    await asyncio.wait_for(follower, HANG_GUARD_S)
    assert [c.version for c in seen] == list(range(1, 21))
    assert all(c.kind == "fn" and c.transitions is None for c in seen)


async def test_subscribe_since_replays_retained_history(counter):
    for _ in range(5):
        await counter.apply(_plus_one)
    seen = []
    async for change in counter.subscribe(since=2):
        seen.append(change.version)
        if change.version == 5:
            break
    assert seen == [3, 4, 5]


async def test_a_pickled_handle_is_read_only_and_a_delegated_one_can_write(counter):
    shipped = pickle.loads(pickle.dumps(counter))
    assert shipped.read_only
    with pytest.raises(WriteRefused, match="read-only"):
        await shipped.apply(_plus_one)
    delegated = pickle.loads(pickle.dumps(counter.delegate()))
    assert await delegated.apply(_plus_one) == 1
    assert (await shipped.snapshot()).count == 1


@ray.remote(num_cpus=0)
class _Intruder:
    """Plays a subagent that finds a named orchestrator and tries to write to it."""

    async def try_write(self, name: str, dedicated: bool) -> str:
        from actors import actor_name, run_host_name
        from cluster import SOLOIST_NAMESPACE

        try:
            if dedicated:
                handle = ray.get_actor(actor_name(name), namespace=SOLOIST_NAMESPACE)
                await handle.apply_fn.remote("guessed-token", "req-1", _plus_one)
            else:  # the run's host holds many runs: a handle with a guessed token sends it the write
                ray.get_actor(run_host_name(name), namespace=SOLOIST_NAMESPACE)  # found by name
                await Orchestrator.attach(name, token="guessed-token").apply(_plus_one, request_id="req-1")
        except ray.exceptions.RayTaskError as exc:
            return type(exc.cause).__name__
        except WriteRefused as exc:  # refused by the run's writer: the handle sent it
            return type(exc).__name__
        return "accepted"

    async def try_attach_and_write(self, name: str) -> str:
        orch = Orchestrator.attach(name)
        try:
            await orch.apply(_plus_one)
        except WriteRefused:
            return "WriteRefused"
        return "accepted"


@pytest.mark.parametrize("dedicated", [False, True], ids=["hosted", "dedicated"])
async def test_a_subagent_that_looks_up_a_named_orchestrator_cannot_write(dedicated: bool):
    orch = Orchestrator(Counter(), name="guarded-run", dedicated=dedicated)
    try:
        intruder = _Intruder.remote()
        assert await intruder.try_write.remote("guarded-run", dedicated) == "WriteRefused"
        assert await intruder.try_attach_and_write.remote("guarded-run") == "WriteRefused"
        assert (await orch.snapshot()).count == 0
        assert await orch.version() == 0
        assert (await orch.statistics()).refused_writes == 1
        ray.kill(intruder)
    finally:
        await orch.close()


def test_a_second_orchestrator_with_a_running_name_is_refused():
    orch = Orchestrator(Counter(), name="only-once")
    try:
        with pytest.raises(ValueError, match="already running"):
            Orchestrator(Counter(), name="only-once")
    finally:
        asyncio.run(orch.close())


def test_attach_to_an_unknown_name_without_a_store_is_an_error():
    with pytest.raises(OrchestratorNotFound, match="no live orchestrator named 'nobody'"):
        Orchestrator.attach("nobody")


async def test_set_max_parallel_normalises_and_clamps(counter):
    counter.set_max_parallel(0)
    assert counter.max_parallel == 4
    counter.set_max_parallel(2)
    assert counter.max_parallel == 2
    counter.set_max_parallel(100)
    settings = counter.handoff_settings()
    assert (settings.max_parallel, settings.requested_max_parallel) == (4, 100)
    reader = pickle.loads(pickle.dumps(counter))
    assert await reader.refresh_max_parallel() == 4
    assert reader.handoff_settings().requested_max_parallel == 100


async def test_set_logger_and_set_tracer_ignore_none(counter):
    before = (counter.handoff_settings().logger, counter.handoff_settings().tracer)
    counter.set_logger(None)
    counter.set_tracer(None)
    assert (counter.handoff_settings().logger, counter.handoff_settings().tracer) == before


# ----------------------------------------------------------------- AgentState runs


@pytest.fixture
async def agent_run():
    orch = Orchestrator(AgentState())
    yield orch
    await orch.close()


async def test_apply_batch_goes_through_reduce_and_returns_the_new_version(agent_run):
    batch = TransitionBatch().update_state("plan", ["a", "b"]).update_stage("exploring")
    assert await agent_run.apply_batch(batch) == 1
    ctx = await agent_run.context()
    assert isinstance(ctx, ContextSnapshot)
    assert ctx.version == 1 and ctx.conversation_stage == "exploring"
    assert ctx.get_state("plan") == ("a", "b")


async def test_apply_batch_is_all_or_nothing(agent_run):
    await agent_run.apply_batch(TransitionBatch().update_state("keep", 1))
    before = (await agent_run.snapshot()).model_dump_json()
    bad = TransitionBatch().update_state("other", 2).delete_state("missing")
    with pytest.raises(TransitionError) as info:
        await agent_run.apply_batch(bad)
    assert info.value.index == 1
    assert (await agent_run.snapshot()).model_dump_json() == before
    assert await agent_run.version() == 1


async def test_apply_batch_with_a_stale_expected_version_conflicts_and_changes_nothing(agent_run):
    await agent_run.apply_batch(TransitionBatch().update_state("n", 1), expected_version=0)
    with pytest.raises(VersionConflict) as info:
        await agent_run.apply_batch(TransitionBatch().update_state("n", 2), expected_version=0)
    assert (info.value.expected, info.value.actual) == (0, 1)
    assert (await agent_run.snapshot()).conversation_state == {"n": 1}


async def test_changes_of_a_batch_carry_its_transitions(agent_run):
    batch = TransitionBatch().update_state("k", "v")
    await agent_run.apply_batch(batch)
    async for change in agent_run.subscribe():
        assert change.kind == "batch" and change.transitions == tuple(batch)
        break


async def test_context_of_a_state_that_is_not_an_agent_state_is_a_clear_error(counter):
    with pytest.raises(TypeError, match="snapshot\\(\\) instead"):
        await counter.context()


async def test_list_live_names_running_named_orchestrators_and_attach_reads_their_statistics():
    orch = Orchestrator(Counter(), name="listed-by-list-live")
    try:
        assert "listed-by-list-live" in Orchestrator.list_live()
        await orch.apply(lambda s: setattr(s, "count", 1))
        stats = await Orchestrator.attach("listed-by-list-live").statistics()
        assert (stats.name, stats.version) == ("listed-by-list-live", 1)
    finally:
        await orch.close()
