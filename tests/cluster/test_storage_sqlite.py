"""SqliteStore: round trips, group commit, crash durability, and every kind of bad file."""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import pickle
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.storage import (
    DuplicateRequest,
    JournalEntry,
    JournalGap,
    MemoryStore,
    RunExists,
    RunInfo,
    SCHEMA_VERSION,
    RunNotFound,
    SchemaTooNew,
    SqliteStore,
    StoreClosed,
    StoreCorrupted,
    StoreReadOnly,
    StoreWriteFailed,
    open_store,
)
from tests._disks import small_disk
from tests._waits import HANG_GUARD_S


def info(name: str = "run") -> RunInfo:
    return RunInfo(name=name, state_type="mymod.MyState", created_at=time.time(), owner_token="s3cret", metadata={"k": 1})


def entry(version: int, request_id: str | None = None, payload: Any = None) -> JournalEntry:
    return JournalEntry(
        version=version,
        request_id=request_id or f"req-{version}",
        kind="batch",
        payload=payload if payload is not None else [{"transition_type": "update_state", "v": version}],
        created_at=time.time(),
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "deep" / "store.sqlite"


@pytest.fixture
def store(path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(path)
    yield s
    s.close()


def good_file(path: Path, versions: int = 5, payload_size: int = 10) -> None:
    """A closed store with one run, ``versions`` journal entries and one agent."""
    s = SqliteStore(path)
    s.create_run(info(), {"n": 0})
    s.append("run", [entry(v, payload={"pad": "x" * payload_size}) for v in range(1, versions + 1)]).result()
    s.put_agent("run", "agent-1", {"lifecycle": "idle"})
    s.close()


# -- round trips ------------------------------------------------------------------------


def test_new_file_and_parent_directory_are_created_in_wal_mode(path: Path, store: SqliteStore) -> None:
    assert path.exists()
    assert store.path == str(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_create_get_and_list_runs_round_trip(store: SqliteStore) -> None:
    first, second = info("a"), info("b")
    store.create_run(first, {"x": 1})
    store.create_run(second, {"x": 2})
    assert store.get_run("a") == first
    assert store.get_run("missing") is None
    assert [r.name for r in store.list_runs()] == ["a", "b"]
    checkpoint, tail = store.load("b")
    assert (checkpoint.version, checkpoint.state, tail) == (0, {"x": 2}, [])


def test_last_versions_of_many_runs_match_what_load_ends_at_without_reading_payloads(path: Path, store: SqliteStore) -> None:
    for name in ("fresh", "busy", "compacted", "broken"):
        store.create_run(info(name), {"n": 0})
    store.append("busy", [entry(v) for v in range(1, 4)]).result()
    store.append("compacted", [entry(v) for v in range(1, 6)]).result()
    store.put_checkpoint("compacted", 5, {"n": 5})
    store.compact("compacted")  # the journal is empty now: the version is the checkpoint's
    store.append("broken", [entry(1), entry(2)]).result()
    with sqlite3.connect(path) as conn:  # a payload nobody can parse: load fails, the version is still known
        conn.execute("UPDATE journal SET payload = 'not json' WHERE run = 'broken'")
    with pytest.raises(StoreCorrupted):
        store.load("broken")
    found = store.last_versions(["fresh", "busy", "compacted", "broken", "missing", "busy"])
    assert found == {"fresh": 0, "busy": 3, "compacted": 5, "broken": 2}
    assert found["compacted"] == store.load("compacted")[0].version
    many = [f"run-{i:04d}" for i in range(1_200)]  # more names than one statement takes
    for name in many:
        store.create_run(info(name), {})
    store.append("run-1100", [entry(1)]).result()
    versions = store.last_versions(many)
    assert len(versions) == 1_200 and versions["run-1100"] == 1 and versions["run-0000"] == 0


def test_last_versions_count_entries_kept_in_memory_in_exit_mode(path: Path) -> None:
    store = SqliteStore(path, durability="exit")
    try:
        store.create_run(info(), {})
        store.append("run", [entry(1), entry(2)])
        assert store.last_versions(["run"]) == {"run": 2}
    finally:
        store.close()


def test_create_run_twice_raises_run_exists_naming_file(store: SqliteStore) -> None:
    store.create_run(info(), {})
    with pytest.raises(RunExists, match=f"'run' already exists in store {store.path}"):
        store.create_run(info(), {})


def test_run_info_repr_hides_owner_token() -> None:
    assert "s3cret" not in repr(info()) and "s3cret" not in str(info())


def test_append_resolves_once_durable_and_load_returns_entries_in_order(store: SqliteStore) -> None:
    store.create_run(info(), {"n": 0})
    assert store.append("run", [entry(1), entry(2)]).result() is None
    assert store.append("run", [entry(3)]).result() is None
    checkpoint, tail = store.load("run")
    assert checkpoint.version == 0
    assert [e.version for e in tail] == [1, 2, 3]
    assert tail[0].payload == [{"transition_type": "update_state", "v": 1}]
    assert store.find_request("run", "req-2") == 2
    assert store.find_request("run", "nope") is None


def test_append_with_a_gap_fails_with_journal_gap_and_writes_nothing(store: SqliteStore) -> None:
    store.create_run(info(), {})
    store.append("run", [entry(1)]).result()
    with pytest.raises(JournalGap, match=rf"store {store.path}, run 'run': version 2 is missing"):
        store.append("run", [entry(3), entry(4)]).result()
    with pytest.raises(JournalGap):
        store.append("run", [entry(2), entry(4)]).result()
    assert [e.version for e in store.load("run")[1]] == [1]


def test_duplicate_request_id_fails_and_writes_nothing(store: SqliteStore) -> None:
    store.create_run(info(), {})
    store.append("run", [entry(1, "same")]).result()
    with pytest.raises(DuplicateRequest, match="'same' of run 'run' was already committed as version 1"):
        store.append("run", [entry(2, "fresh"), entry(3, "same")]).result()
    with pytest.raises(DuplicateRequest):
        store.append("run", [entry(2, "twice"), entry(3, "twice")]).result()
    assert store.find_request("run", "fresh") is None
    store.append("run", [entry(2, "fresh")]).result()


def test_unknown_run_raises_run_not_found(store: SqliteStore) -> None:
    with pytest.raises(RunNotFound, match="'ghost' not found"):
        store.append("ghost", [entry(1)]).result()
    with pytest.raises(RunNotFound):
        store.load("ghost")
    with pytest.raises(RunNotFound):
        store.put_agent("ghost", "a", {})


def test_non_json_payload_is_rejected_before_anything_is_queued(store: SqliteStore) -> None:
    store.create_run(info(), {})
    with pytest.raises(ValueError, match="payload of version 1 is not JSON-clean"):
        store.append("run", [entry(1, payload={"x": object()})])


def test_failing_append_in_a_group_does_not_fail_its_neighbours(store: SqliteStore) -> None:
    store.create_run(info("a"), {})
    store.create_run(info("b"), {})
    futures = [store.append("a", [entry(1)]), store.append("b", [entry(7)]), store.append("a", [entry(2)])]
    assert futures[0].result() is None and futures[2].result() is None
    assert isinstance(futures[1].exception(), JournalGap)


def test_compact_keeps_the_last_two_checkpoints_and_load_is_checkpoint_plus_tail(path: Path, store: SqliteStore) -> None:
    store.create_run(info(), {"n": 0})
    store.append("run", [entry(v) for v in range(1, 6)]).result()
    store.put_checkpoint("run", 2, {"n": 2})
    store.put_checkpoint("run", 4, {"n": 4})
    assert store.statistics().checkpoints == 3
    store.compact("run")
    assert store.statistics().checkpoints == 2
    store.close()
    reopened = SqliteStore(path)
    checkpoint, tail = reopened.load("run")
    assert (checkpoint.version, checkpoint.state) == (4, {"n": 4})
    assert [e.version for e in tail] == [5]
    reopened.close()


def test_checkpoint_ahead_of_the_journal_raises_journal_gap(store: SqliteStore) -> None:
    store.create_run(info(), {})
    with pytest.raises(JournalGap, match="checkpoint at version 3 but the journal ends at 0"):
        store.put_checkpoint("run", 3, {})


def test_compact_removes_covered_rows_and_request_ids_stay_findable(store: SqliteStore) -> None:
    store.create_run(info(), {})
    store.append("run", [entry(v) for v in range(1, 5)]).result()
    store.put_checkpoint("run", 3, {"n": 3})
    assert store.compact("run") == 3
    assert store.compact("run") == 0
    assert store.find_request("run", "req-1") == 1
    assert [e.version for e in store.load("run")[1]] == [4]
    assert store.statistics().journal_rows == 1
    with pytest.raises(DuplicateRequest):
        store.append("run", [entry(5, "req-2")]).result()


def test_agents_upsert_with_increasing_seq_and_list_in_seq_order(store: SqliteStore) -> None:
    store.create_run(info(), {})
    first = store.put_agent("run", "a", {"lifecycle": "initializing"})
    store.put_agent("run", "b", {"lifecycle": "idle"})
    updated = store.put_agent("run", "a", {"lifecycle": "running"})
    assert (first.seq, updated.seq) == (1, 3)
    assert store.get_agent("run", "a") == updated
    assert store.get_agent("run", "zzz") is None
    assert [(r.agent_id, r.seq) for r in store.list_agents("run")] == [("b", 2), ("a", 3)]


def test_statistics_count_commits_and_batches(store: SqliteStore) -> None:
    store.create_run(info(), {})
    store.append("run", [entry(1), entry(2)]).result()
    stats = store.statistics()
    assert (stats.path, stats.durability, stats.journal_rows, stats.checkpoints) == (store.path, "sync", 2, 1)
    assert stats.commits == 2 and stats.fsync_batches == 2 and stats.mean_batch_size == 1.0


def test_close_is_idempotent_and_later_calls_raise_store_closed(store: SqliteStore) -> None:
    store.close()
    store.close()
    with pytest.raises(StoreClosed):
        store.append("run", [entry(1)]).result()
    with pytest.raises(StoreClosed):
        store.get_run("run")


def test_open_store_accepts_none_a_store_or_a_path(path: Path) -> None:
    memory = MemoryStore()
    assert open_store(None) is None
    assert open_store(memory) is memory
    opened = open_store(path, durability="batch")
    assert isinstance(opened, SqliteStore) and opened.durability == "batch"
    opened.close()
    with pytest.raises(TypeError, match="not int"):
        open_store(3)  # type: ignore[arg-type]


def test_unknown_durability_is_a_value_error(path: Path) -> None:
    with pytest.raises(ValueError, match="durability"):
        SqliteStore(path, durability="never")  # type: ignore[arg-type]


# -- group commit, exit mode, crash ----------------------------------------------------


def test_group_commit_shares_fsyncs_between_threads(store: SqliteStore) -> None:
    threads, per_thread = 8, 200
    for t in range(threads):
        store.create_run(info(f"r{t}"), {})
    before = store.statistics()
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        for v in range(1, per_thread + 1):
            error = store.append(f"r{t}", [entry(v)]).exception()
            if error is not None:
                errors.append(error)

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stats = store.statistics()
    commits, batches = stats.commits - before.commits, stats.fsync_batches - before.fsync_batches
    assert errors == []
    assert commits == threads * per_thread
    assert batches < commits
    assert stats.journal_rows == threads * per_thread
    for t in range(threads):
        assert [e.version for e in store.load(f"r{t}")[1]] == list(range(1, per_thread + 1))


def test_exit_mode_keeps_entries_in_memory_until_flush(path: Path) -> None:
    s = SqliteStore(path, durability="exit")
    s.create_run(info(), {})
    assert s.append("run", [entry(1)]).done()
    assert s.statistics().journal_rows == 0
    s.flush()
    assert s.statistics().journal_rows == 1
    s.append("run", [entry(2)])
    s.close()
    reopened = SqliteStore(path)
    assert [e.version for e in reopened.load("run")[1]] == [1, 2]
    reopened.close()


def test_exit_mode_append_errors_surface_from_flush(path: Path) -> None:
    s = SqliteStore(path, durability="exit")
    s.create_run(info(), {})
    s.append("run", [entry(5)])
    with pytest.raises(JournalGap):
        s.flush()
    s.close()


def test_exit_mode_checkpoints_of_many_runs_at_once_never_overtake_their_entries(path: Path) -> None:
    # Many runs of one exit-mode store closing at once (a host unloading them): each writes
    # its entries and then a checkpoint from its own thread, while another thread may be
    # draining those entries. A checkpoint must never reach the writer before its entries.
    s = SqliteStore(path, durability="exit")
    runs = [f"run-{i}" for i in range(100)]
    for run in runs:
        s.create_run(info(run), {})
    start = threading.Barrier(len(runs))

    def close_run(run: str) -> None:
        for v in range(1, 6):
            s.append(run, [entry(v, f"{run}-{v}")])
        start.wait()
        s.put_checkpoint(run, 5, {"v": 5})

    with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
        for done in [pool.submit(close_run, run) for run in runs]:
            done.result()  # a JournalGap here is a checkpoint that overtook its entries
    s.close()
    reopened = SqliteStore(path)
    assert all(reopened.load(run)[0].version == 5 for run in runs)
    reopened.close()


_APPENDER = textwrap.dedent(
    """
    import sys, threading
    from cluster.storage import JournalEntry, RunInfo, SqliteStore
    path, who = sys.argv[1], sys.argv[2]
    store = SqliteStore(path, durability="sync")
    runs = [f"{who}-{i}" for i in range(8)]
    for run in runs:
        store.create_run(RunInfo(name=run, state_type="m.S", created_at=0.0, owner_token="t"), {})
    def write(run):
        for v in range(1, 51):
            store.append(run, [JournalEntry(version=v, request_id=f"{run}-{v}", kind="fn", payload={"v": v}, created_at=0.0)]).result()
    threads = [threading.Thread(target=write, args=(run,)) for run in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    """
)


def test_two_processes_writing_one_file_at_once_both_commit_every_append_once(path: Path) -> None:
    # Two stores in two processes take turns on the file (its write gate, then SQLite's lock).
    SqliteStore(path).close()  # the file exists before either writer starts
    children = [subprocess.Popen([sys.executable, "-c", _APPENDER, str(path), who]) for who in ("a", "b")]
    assert [c.wait(timeout=HANG_GUARD_S) for c in children] == [0, 0]
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT run, COUNT(*), COUNT(DISTINCT version), MAX(version) FROM requests GROUP BY run").fetchall()
    assert sorted(rows) == sorted((f"{who}-{i}", 50, 50, 50) for who in ("a", "b") for i in range(8))


_CHILD = textwrap.dedent(
    """
    import sys, time
    from cluster.storage import JournalEntry, RunInfo, SqliteStore
    store = SqliteStore(sys.argv[1], durability="sync")
    store.create_run(RunInfo(name="run", state_type="m.S", created_at=0.0, owner_token="t"), {})
    print("ready", flush=True)
    version = 0
    while True:
        version += 1
        entry = JournalEntry(version=version, request_id=f"r{version}", kind="fn", payload={"v": version},
                             created_at=time.time())
        store.append("run", [entry]).result()
        print(version, flush=True)
    """
)


def test_sync_appends_acknowledged_before_sigkill_survive(tmp_path: Path) -> None:
    path = tmp_path / "crash.sqlite"
    with subprocess.Popen([sys.executable, "-c", _CHILD, str(path)], stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        acknowledged = [int(child.stdout.readline()) for _ in range(150)]
        os.kill(child.pid, signal.SIGKILL)
        acknowledged += [int(line) for line in child.stdout.read().split()]
    assert child.returncode == -signal.SIGKILL
    s = SqliteStore(path)
    stored = [e.version for e in s.load("run")[1]]
    s.close()
    assert stored[: len(acknowledged)] == acknowledged
    assert stored == list(range(1, len(stored) + 1))


# -- bad stores --------------------------------------------------------------------------


def test_random_bytes_file_is_reported_corrupted_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(os.urandom(8192))
    before = digest(path)
    with pytest.raises(StoreCorrupted, match=rf"store {path} is corrupted: not a SQLite database"):
        SqliteStore(path)
    assert digest(path) == before


def test_truncated_file_is_reported_corrupted_and_left_untouched(tmp_path: Path) -> None:
    good = tmp_path / "good.sqlite"
    good_file(good, versions=200, payload_size=400)
    cut = tmp_path / "cut.sqlite"
    data = good.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    before = digest(cut)
    with pytest.raises(StoreCorrupted, match=f"store {cut} is corrupted"):
        SqliteStore(cut)
    assert digest(cut) == before


def test_journal_with_a_gap_fails_load_naming_file_run_and_version(tmp_path: Path) -> None:
    path = tmp_path / "gap.sqlite"
    good_file(path, versions=3)
    raw = sqlite3.connect(path)
    raw.execute("INSERT INTO journal VALUES ('run', 5, 'r5', 'batch', '[]', 0.0)")
    raw.commit()
    raw.close()
    before = digest(path)
    s = SqliteStore(path)
    with pytest.raises(JournalGap, match=rf"store {path}, run 'run': version 4 is missing"):
        s.load("run")
    s.close()
    assert digest(path) == before


def test_row_with_invalid_json_is_reported_corrupted(tmp_path: Path) -> None:
    path = tmp_path / "json.sqlite"
    good_file(path)
    raw = sqlite3.connect(path)
    raw.execute("UPDATE agents SET record = '{not json'")
    raw.execute("UPDATE journal SET payload = '[' WHERE version = 2")
    raw.commit()
    raw.close()
    s = SqliteStore(path)
    with pytest.raises(StoreCorrupted, match=rf"store {path} is corrupted: record of agent 'agent-1'"):
        s.list_agents("run")
    with pytest.raises(StoreCorrupted, match="journal version 2 of run 'run' is not valid JSON"):
        s.load("run")
    assert s.find_request("run", "req-5") == 5
    s.close()


def test_file_from_a_newer_schema_raises_schema_too_new(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite"
    good_file(path)
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 99")
    raw.commit()
    raw.close()
    before = digest(path)
    with pytest.raises(SchemaTooNew, match=rf"{path} has schema version 99, .* supports schema version 2 .* upgrade soloist"):
        SqliteStore(path)
    assert digest(path) == before


def test_a_store_on_a_read_only_file_system_is_refused_with_store_read_only_and_keeps_rows(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        path = disk.mountpoint / "ro.sqlite"
        good_file(path)
        before = digest(path)
        disk.read_only()  # a real read-only file system: the kernel answers EROFS
        try:
            with pytest.raises(StoreReadOnly, match=rf"could not write to store {path}: .*state in memory is unchanged"):
                SqliteStore(path)
            assert digest(path) == before
        finally:
            disk.writable()
        s = SqliteStore(path)
        try:
            assert [e.version for e in s.load("run")[1]] == [1, 2, 3, 4, 5]
            assert s.append("run", [entry(6)]).exception() is None  # writable again: the store goes on
        finally:
            s.close()


def test_full_disk_fails_every_future_in_the_batch_and_keeps_committed_rows(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        path = disk.mountpoint / "full.sqlite"
        good_file(path)
        s = SqliteStore(path)
        disk.fill()  # a real full disk: the kernel answers ENOSPC
        try:
            error = s.append("run", [entry(6, payload={"pad": "x" * 100_000})]).exception()
            assert isinstance(error, StoreWriteFailed) and not isinstance(error, StoreReadOnly)
            assert f"could not write to store {path}: database or disk is full" in str(error)
            assert [e.version for e in s.load("run")[1]] == [1, 2, 3, 4, 5]
            disk.free()
            assert s.append("run", [entry(6, payload={"pad": "x" * 100_000})]).exception() is None  # goes on once freed
        finally:
            s.close()


def test_store_errors_survive_pickling_with_their_fields(tmp_path: Path) -> None:
    error = DuplicateRequest(path=str(tmp_path), run="r", request_id="q", version=3)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is DuplicateRequest and str(copy) == str(error)
    assert (copy.path, copy.run, copy.request_id, copy.version) == (str(tmp_path), "r", "q", 3)


def test_copy_of_a_live_store_with_its_wal_opens_cleanly(tmp_path: Path, store: SqliteStore) -> None:
    store.create_run(info(), {})
    store.append("run", [entry(1)]).result()
    copy_dir = tmp_path / "copy"
    copy_dir.mkdir()
    for suffix in ("", "-wal"):
        shutil.copy(f"{store.path}{suffix}", copy_dir / f"store.sqlite{suffix}")
    reopened = SqliteStore(copy_dir / "store.sqlite")
    assert [e.version for e in reopened.load("run")[1]] == [1]
    reopened.close()
