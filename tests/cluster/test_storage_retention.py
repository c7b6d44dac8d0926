"""Retention: a compaction window with checkpoints, reads of any kept version, run deletion."""

from __future__ import annotations

import time
from typing import get_args

import pytest

from actors import RunOutcome, RunRecord
from tests._stores import ALL_KINDS
from cluster.storage import (
    FINISHED_STATUSES,
    FinalStatus,
    JournalEntry,
    RunInfo,
    RunNotFound,
    Store,
    VersionCompacted,
    parse_age,
    remove_finished_runs,
)


def _info(name: str = "run") -> RunInfo:
    return RunInfo(name=name, state_type="t.S", created_at=time.time(), owner_token="tok", metadata={"a": 1})


def _entry(version: int) -> JournalEntry:
    return JournalEntry(version=version, request_id=f"q{version}", kind="fn", payload=[], created_at=time.time())


@pytest.fixture(params=ALL_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    """Every kind of store, the in-memory one too (``store`` comes from ``conftest.py``)."""
    return str(request.param)


def _filled(store: Store, last: int = 10) -> Store:
    store.create_run(_info(), {"n": 0})
    store.append("run", [_entry(v) for v in range(1, last + 1)]).result()
    for v in (3, 6, 9):
        store.put_checkpoint("run", v, {"n": v})
    return store


def test_compact_with_a_window_keeps_every_state_from_the_checkpoint_before_it(store: Store) -> None:
    _filled(store)
    assert store.compact("run", keep_from=7) == 6  # base = checkpoint 6: rows 1..6 go
    assert store.oldest_version("run") == 6
    assert [e.version for e in store.entries("run", 0, 10)] == [7, 8, 9, 10]
    checkpoint, tail = store.load_at("run", 8)
    assert (checkpoint.version, [e.version for e in tail]) == (6, [7, 8])
    checkpoint, tail = store.load_at("run", 6)
    assert (checkpoint.version, tail) == (6, [])
    assert store.find_request("run", "q7") == 7
    assert store.find_request("run", "q2") is None  # request ids older than the window go too


def test_find_requests_answers_like_find_request_for_many_ids_at_once(store: Store) -> None:
    _filled(store)
    assert store.find_requests("run", ["q2", "q7", "nope", "q7"]) == {"q2": 2, "q7": 7}
    store.compact("run", keep_from=7)
    assert store.find_requests("run", ["q2", "q7", "q10"]) == {"q7": 7, "q10": 10}  # the window holds for both


def test_a_version_older_than_the_window_is_refused_naming_the_oldest_kept(store: Store) -> None:
    _filled(store)
    store.compact("run", keep_from=7)
    with pytest.raises(VersionCompacted, match="version 5 of run 'run' was compacted away.*earliest version still kept is 6") as caught:
        store.load_at("run", 5)
    assert (caught.value.requested, caught.value.oldest) == (5, 6)


def test_a_window_before_every_checkpoint_but_zero_removes_nothing(store: Store) -> None:
    _filled(store)
    assert store.compact("run", keep_from=2) == 0
    assert store.oldest_version("run") == 0
    assert [e.version for e in store.entries("run", 0, 10)] == list(range(1, 11))
    assert store.load_at("run", 2)[0].version == 0


def test_delete_run_removes_everything_and_leaves_other_runs(store: Store) -> None:
    _filled(store)
    store.create_run(_info("other"), {"n": 0})
    store.delete_run("run")
    assert store.get_run("run") is None
    assert [i.name for i in store.list_runs()] == ["other"]
    with pytest.raises(RunNotFound):
        store.delete_run("run")


def test_update_run_metadata_merges_and_survives(store: Store) -> None:
    store.create_run(_info(), {"n": 0})
    store.update_run_metadata("run", {"status": "complete"})
    info = store.get_run("run")
    assert info is not None and info.metadata == {"a": 1, "status": "complete"}


def test_gc_removes_only_runs_finished_long_enough_ago(store: Store) -> None:
    now = 1_000_000.0
    for name, meta in {
        "old-done": {"status": "complete", "finished_at": now - 8 * 86_400},
        "new-done": {"status": "stopped", "finished_at": now - 3600},
        "waiting": {"status": "waiting", "updated_at": now - 30 * 86_400},
        "plain": {},
    }.items():
        store.create_run(_info(name), {"n": 0})
        if meta:
            store.update_run_metadata(name, meta)
    dry = remove_finished_runs(store, 7 * 86_400, dry_run=True, now=now)
    assert dry.removed == ("old-done",) and store.get_run("old-done") is not None
    report = remove_finished_runs(store, 7 * 86_400, now=now)
    assert report.removed == ("old-done",)
    assert sorted(report.kept) == ["new-done", "plain", "waiting"]
    assert store.get_run("old-done") is None


def test_gc_collects_exactly_the_final_statuses_a_run_records_and_reports() -> None:
    # One list: what a Run records as final in its state and its outcome is what gc removes.
    recorded = set(get_args(RunRecord.model_fields["status"].annotation)) - {"running", "waiting"}
    reported = set(get_args(RunOutcome.model_fields["status"].annotation)) - {"waiting"}
    assert recorded == reported == FINISHED_STATUSES == set(get_args(FinalStatus))
    assert "failed" not in FINISHED_STATUSES  # no driver ever records it


def test_ages_parse_with_units_and_bad_ones_say_what_is_expected() -> None:
    assert [parse_age(t) for t in ("7d", "12h", "30m", "45s", "2w", "10")] == [604_800, 43_200, 1_800, 45, 1_209_600, 10]
    with pytest.raises(ValueError, match="such as 7d"):
        parse_age("seven days")
