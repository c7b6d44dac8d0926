"""Fencing epochs of the SQL stores: a superseded activation of a run never commits again."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any
from pathlib import Path

import pytest

from tests._stores import StoreLocation
from cluster.storage import SCHEMA_VERSION, JournalEntry, RunInfo, RunLockedElsewhere, SqliteStore, WriterFenced


def _info(name: str) -> RunInfo:
    return RunInfo(name=name, state_type="m.S", created_at=time.time(), owner_token="t", metadata={})


def _entry(version: int) -> JournalEntry:
    return JournalEntry(version=version, request_id=f"req-{version}", kind="fn", payload={"v": version}, created_at=time.time())


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "runs.sqlite"


@pytest.fixture
def stores(store_location: StoreLocation) -> tuple[Any, Any]:
    """Two store objects on one file or database: an older and a newer writer of a run."""
    return store_location.open(), store_location.open()


def _journal(store_location: StoreLocation, run: str) -> list[int]:
    with store_location.raw() as conn:
        return [v for (v,) in conn.execute(f"SELECT version FROM journal WHERE run = '{run}' ORDER BY version").fetchall()]


def test_each_activation_raises_the_epoch_and_records_its_holder(stores: tuple[Any, Any]) -> None:
    old, new = stores
    assert old.activate("r", holder={"host": "a"}) == 1
    assert new.activate("r", holder={"host": "b"}) == 2
    assert old.activation("r") == (2, {"host": "b"})
    assert old.activation("never") is None


def test_a_writer_of_a_deleted_run_cannot_write_the_run_created_again_under_its_name(
    store_location: StoreLocation, stores: tuple[Any, Any]
) -> None:
    """Deleting a run removes its activation, so the run created again under that name counts
    its epochs from 1 anew: the old writer, still alive with epoch 1, must not pass the new
    run's fence at epoch 1 (its activation is another one, whatever its number)."""
    old, new = stores
    old.create_run(_info("r"), {"n": 0})
    assert old.activate("r", holder={"host": "a"}) == 1
    old.append("r", [_entry(1)]).result()
    new.delete_run("r")
    new.create_run(_info("r"), {"n": 0})
    assert new.activate("r", holder={"host": "b"}) == 1  # the same number, another activation
    with pytest.raises(WriterFenced):
        old.append("r", [_entry(1)]).result()
    assert _journal(store_location, "r") == []
    new.append("r", [_entry(1)]).result()
    assert _journal(store_location, "r") == [1]


def test_a_superseded_activation_cannot_append_and_nothing_is_stored(store_location: StoreLocation, stores: tuple[Any, Any]) -> None:
    old, new = stores
    old.activate("r", holder={"host": "a"})
    old.create_run(_info("r"), {"n": 0})
    old.append("r", [_entry(1)]).result()
    new.activate("r", holder={"host": "b", "pid": 7})

    with pytest.raises(WriterFenced, match=r"epoch 1\) was superseded by epoch 2, held by pid 7") as caught:
        old.append("r", [_entry(2)]).result()
    assert isinstance(caught.value, RunLockedElsewhere)  # callers that handle "another writer" handle this too
    assert (caught.value.epoch, caught.value.current, caught.value.holder["host"]) == (1, 2, "b")
    assert _journal(store_location, "r") == [1]

    new.append("r", [_entry(2)]).result()  # the newest activation goes on from the stored journal
    assert _journal(store_location, "r") == [1, 2]


def test_every_kind_of_write_of_a_superseded_activation_is_refused(stores: tuple[Any, Any]) -> None:
    old, new = stores
    old.activate("r", holder={})
    old.create_run(_info("r"), {"n": 0})
    old.append("r", [_entry(1)]).result()
    new.activate("r", holder={})
    for write in (lambda: old.put_checkpoint("r", 1, {"n": 1}), lambda: old.compact("r"),
                  lambda: old.update_run_metadata("r", {"status": "done"}), lambda: old.put_agent("r", "a", {}),
                  lambda: old.delete_run("r")):
        with pytest.raises(WriterFenced):
            write()
    assert new.get_run("r") is not None and new.get_run("r").metadata == {}


def test_a_deactivated_run_is_written_again_only_through_a_new_activation(stores: tuple[Any, Any]) -> None:
    old, new = stores
    old.activate("r", holder={})
    old.create_run(_info("r"), {"n": 0})
    old.deactivate("r")
    assert new.activate("r", holder={}) == 2
    new.append("r", [_entry(1)]).result()
    assert old.activate("r", holder={}) == 3  # taking it back supersedes the other
    with pytest.raises(WriterFenced):
        new.append("r", [_entry(2)]).result()


def test_a_store_of_schema_1_is_migrated_in_place_and_keeps_its_runs(path: Path) -> None:
    first = SqliteStore(path)
    first.create_run(_info("r"), {"n": 0})
    first.append("r", [_entry(1)]).result()
    first.close()
    with sqlite3.connect(path) as conn:  # as soloist before fencing wrote it
        conn.execute("DROP TABLE activations")
        conn.execute("DROP TABLE blobs")
        conn.execute("PRAGMA user_version = 1")

    reopened = SqliteStore(path)
    try:
        assert reopened.activate("r", holder={}) == 1
        reopened.append("r", [_entry(2)]).result()
        assert [e.version for e in reopened.load("r")[1]] == [1, 2]
    finally:
        reopened.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3


def test_activations_racing_from_many_store_objects_each_get_their_own_epoch(store_location: StoreLocation) -> None:
    stores = [store_location.open() for _ in range(6)]
    start = threading.Barrier(len(stores))
    epochs: list[int] = []

    def activate(store: Any, i: int) -> None:
        start.wait()
        epochs.append(store.activate("r", holder={"i": i}))

    threads = [threading.Thread(target=activate, args=(s, i)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(epochs) == [1, 2, 3, 4, 5, 6]
    newest = stores[0].activation("r")
    assert newest is not None and newest[0] == 6
