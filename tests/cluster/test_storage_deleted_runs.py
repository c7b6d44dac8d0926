"""Deleting a run leaves nothing of it behind: no writer lock file, no activation row.

Counted from outside the store: the files of the SQLite store's lock directory and the rows
of the ``activations`` (and PostgreSQL's ``writer_claims``) tables, with several runs
created, written as an orchestrator writes them (claimed, activated) and deleted. What is
left is bounded by the runs still stored, however many came and went.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

from cluster.storage import RunLockedElsewhere, remove_finished_runs
from tests._stores import StoreLocation, batch_entry, run_info

N = 60
LIVE = 3


def _lock_files(where: StoreLocation) -> int:
    directory = f"{where.location}.locks"
    return sum(name.endswith(".lock") for name in os.listdir(directory)) if os.path.isdir(directory) else 0


def _left(where: StoreLocation) -> dict[str, int]:
    """What the store keeps per run name, counted behind its back."""
    counts = {"activations": where.count("SELECT COUNT(*) FROM activations")}
    if where.kind == "sqlite":
        counts["lock files"] = _lock_files(where)
    else:
        counts["claim records"] = where.count("SELECT COUNT(*) FROM writer_claims")
    return counts


def _write_as_its_writer(where: StoreLocation, name: str, **metadata: Any) -> None:
    """Create and write the run as its orchestrator does: claim, activate, create, append,
    then give it up (closed)."""
    writer = where.open()
    try:
        writer.claim_writer(name, holder={"test": "deleted runs"})
        writer.activate(name, holder={"test": "deleted runs"})
        writer.create_run(run_info(name).model_copy(update={"metadata": metadata}), {"n": 0})
        writer.append(name, [batch_entry(1)]).result()
    finally:
        writer.close()


def test_deleted_runs_leave_no_lock_file_and_no_activation(store_location: StoreLocation) -> None:
    collector = store_location.open()
    for i in range(LIVE):
        _write_as_its_writer(store_location, f"live-{i}")
    for i in range(N):
        _write_as_its_writer(store_location, f"gone-{i}")
        collector.delete_run(f"gone-{i}")
    # Before: one activation row and one lock file for each of the N deleted runs too.
    left = _left(store_location)
    assert left["activations"] == LIVE and max(left.values()) == LIVE, left
    assert [info.name for info in collector.list_runs()] == [f"live-{i}" for i in range(LIVE)]


def test_runs_collected_by_gc_leave_nothing_either(store_location: StoreLocation) -> None:
    finished = {"status": "complete", "finished_at": time.time() - 3600}
    for i in range(N):
        _write_as_its_writer(store_location, f"done-{i}", **finished)
    _write_as_its_writer(store_location, "still-running")
    report = remove_finished_runs(store_location.open(), older_than=60)
    assert len(report.removed) == N and report.kept == ("still-running",)
    left = _left(store_location)
    assert left["activations"] == 1 and max(left.values()) == 1, left


def test_a_plain_store_creating_and_deleting_runs_keeps_no_lock_file(store_location: StoreLocation) -> None:
    store = store_location.open()
    for i in range(N):
        store.create_run(run_info(f"r{i}"), {"n": 0})
        store.append(f"r{i}", [batch_entry(1)]).result()
        store.delete_run(f"r{i}")
    assert _left(store_location) == {key: 0 for key in _left(store_location)}


def test_a_run_deleted_by_its_own_writer_loses_its_lock_file_only_at_release(store_location: StoreLocation) -> None:
    writer = store_location.open()
    writer.claim_writer("r", holder={"who": "writer"})
    writer.create_run(run_info("r"), {"n": 0})
    writer.delete_run("r")
    with pytest.raises(RunLockedElsewhere):  # still its one writer until it lets go
        store_location.open().claim_writer("r", holder={"who": "other"}, timeout=0.1)
    writer.release_writer("r")
    assert _left(store_location) == {key: 0 for key in _left(store_location)}


def test_a_claim_waiting_while_the_run_is_deleted_still_excludes_every_other_writer(
    store_location: StoreLocation,
) -> None:
    # The waiter opened the lock file before it was removed: it must lock the file now at the
    # path, or a third writer would lock that one and both would believe they hold the run.
    holder, waiter, third = store_location.open(), store_location.open(), store_location.open()
    holder.claim_writer("r", holder={"who": "holder"})
    holder.create_run(run_info("r"), {"n": 0})
    claimed = threading.Event()
    errors: list[BaseException] = []

    def wait_for_it() -> None:
        try:
            waiter.claim_writer("r", holder={"who": "waiter"}, timeout=30)
            claimed.set()
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    time.sleep(0.3)  # the waiter is polling the lock file now
    holder.delete_run("r")
    holder.release_writer("r")
    thread.join(30)
    assert not errors and claimed.is_set()
    with pytest.raises(RunLockedElsewhere) as refused:
        third.claim_writer("r", holder={"who": "third"}, timeout=0.2)
    assert refused.value.holder["who"] == "waiter"
    with pytest.raises(RunLockedElsewhere):
        third.create_run(run_info("r"), {"n": 0})
    waiter.release_writer("r")
