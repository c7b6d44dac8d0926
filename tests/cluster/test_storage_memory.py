"""MemoryStore honours the same contract as the SQL stores (each test runs on memory, SQLite and PostgreSQL)."""

from __future__ import annotations

import time
from typing import Any

import pytest

import cluster.storage
from tests._stores import ALL_KINDS
from cluster.storage import (
    DuplicateRequest,
    JournalEntry,
    JournalGap,
    MemoryStore,
    RunExists,
    RunInfo,
    RunNotFound,
    Store,
    StoreClosed,
)


def info(name: str = "run") -> RunInfo:
    return RunInfo(name=name, state_type="mymod.MyState", created_at=time.time(), owner_token="tok")


def entry(version: int, request_id: str | None = None, payload: Any = None) -> JournalEntry:
    return JournalEntry(
        version=version, request_id=request_id or f"q{version}", kind="fn", payload=payload or {}, created_at=1.0
    )


@pytest.fixture(params=ALL_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    """Every kind of store, the in-memory one too (``store`` comes from ``conftest.py``)."""
    return str(request.param)


def test_memory_store_satisfies_the_store_protocol_and_has_no_path() -> None:
    store = MemoryStore()
    assert isinstance(store, Store)
    assert store.path is None
    assert store.statistics().durability is None


def test_every_store_declares_its_writer_claims_and_a_memory_store_has_the_defaults(store: Store) -> None:
    # The writer calls these on every store (no probing for the capability): a store shared by
    # processes claims and fences; a memory store, in one process, has nothing to claim or fence.
    assert isinstance(store, Store)
    store.claim_writer("run", holder={"test": "claims"}, timeout=0.1)
    store.check_writer("run")
    activating = store.activate_async("run", holder={"test": "claims"})
    if isinstance(store, MemoryStore):
        assert activating is None
    else:
        assert activating is not None and activating.result() == 1
    store.deactivate("run")
    store.release_writer("run")


def test_runs_round_trip(store: Store) -> None:
    store.create_run(info("a"), {"x": [1]})
    assert store.get_run("a") == info("a").model_copy(update={"created_at": store.get_run("a").created_at})  # type: ignore[union-attr]
    assert [r.name for r in store.list_runs()] == ["a"]
    with pytest.raises(RunExists):
        store.create_run(info("a"), {})
    checkpoint, tail = store.load("a")
    assert (checkpoint.version, checkpoint.state, tail) == (0, {"x": [1]}, [])


def test_journal_checkpoint_compact_round_trip(store: Store) -> None:
    store.create_run(info(), {})
    store.append("run", [entry(1, payload={"a": 1}), entry(2)]).result()
    store.append("run", [entry(3)]).result()
    store.flush()
    assert [e.version for e in store.load("run")[1]] == [1, 2, 3]
    assert store.load("run")[1][0].payload == {"a": 1}
    store.put_checkpoint("run", 1, {"n": 1})
    store.put_checkpoint("run", 2, {"n": 2})
    store.put_checkpoint("run", 3, {"n": 3})
    assert store.statistics().checkpoints == 4
    assert store.compact("run") == 3
    assert store.statistics().checkpoints == 2
    checkpoint, tail = store.load("run")
    assert (checkpoint.version, checkpoint.state, tail) == (3, {"n": 3}, [])
    assert store.find_request("run", "q1") == 1


def test_all_requests_are_every_stored_id_or_none_when_there_are_more_than_asked(store: Store) -> None:
    store.create_run(info(), {})
    store.append("run", [entry(1), entry(2), entry(3)]).result()
    assert store.all_requests("run", at_most=3) == {"q1": 1, "q2": 2, "q3": 3}
    assert store.all_requests("run", at_most=2) is None
    store.put_checkpoint("run", 2, {"n": 2})
    store.compact("run", keep_from=2)
    assert store.all_requests("run", at_most=2) == {"q2": 2, "q3": 3}


def test_gaps_duplicates_and_unknown_runs_fail_the_future(store: Store) -> None:
    store.create_run(info(), {})
    store.append("run", [entry(1)]).result()
    assert isinstance(store.append("run", [entry(3)]).exception(), JournalGap)
    assert isinstance(store.append("run", [entry(2, "q1")]).exception(), DuplicateRequest)
    assert isinstance(store.append("nope", [entry(1)]).exception(), RunNotFound)
    with pytest.raises(JournalGap):
        store.put_checkpoint("run", 9, {})
    assert [e.version for e in store.load("run")[1]] == [1]


def test_agents_round_trip_in_seq_order(store: Store) -> None:
    store.create_run(info(), {})
    store.put_agent("run", "a", {"v": 1})
    store.put_agent("run", "b", {"v": 1})
    row = store.put_agent("run", "a", {"v": 2})
    assert row.seq == 3 and row.record == {"v": 2}
    assert store.get_agent("run", "a") == row
    assert store.get_agent("run", "missing") is None
    assert [r.agent_id for r in store.list_agents("run")] == ["b", "a"]


def test_stored_values_are_copies_not_the_callers_objects(store: Store) -> None:
    state: dict[str, Any] = {"items": [1]}
    store.create_run(info(), state)
    state["items"].append(2)
    loaded = store.load("run")[0].state
    assert loaded == {"items": [1]}
    loaded["items"].append(3)
    assert store.load("run")[0].state == {"items": [1]}


def test_writes_after_close_fail_with_store_closed(store: Store) -> None:
    store.create_run(info(), {})
    store.close()
    store.close()
    assert isinstance(store.append("run", [entry(1)]).exception(), StoreClosed)
    with pytest.raises(StoreClosed):
        store.put_agent("run", "a", {})


def test_package_exports_exactly_the_public_surface() -> None:
    assert sorted(cluster.storage.__all__) == sorted(
        [
            "SCHEMA_VERSION", "AgentRecordRow", "Checkpoint", "DuplicateRequest", "Durability", "DURABILITY_MODES", "check_durability", "check_request_id", "JournalEntry",
            "JournalGap", "MemoryStore", "PostgresStore", "RunExists", "RunInfo", "RunLockedElsewhere", "RunNotFound", "SchemaTooNew",
            "SqliteStore", "Store", "StoreClosed", "StoreCorrupted", "StoreError", "StoreHealth", "StoreReadOnly", "StoreStatistics",
            "StoreUnreachable", "WriterFenced",
            "StoreWriteFailed", "VersionCompacted", "FINISHED_STATUSES", "FinalStatus", "GcReport", "finished_runs",
            "parse_age", "remove_finished_runs", "apply_diff", "diff_states", "open_store", "portable_path", "resolve_path", "is_postgres_url", "redact", "replay",
        ]
    )
    for name in cluster.storage.__all__:
        assert hasattr(cluster.storage, name)
