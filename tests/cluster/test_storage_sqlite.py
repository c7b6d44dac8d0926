"""SqliteStore's own facts: its file in WAL mode, crash durability of a killed writer, and every
kind of bad file or disk. What every store does is tested in ``test_storage_contract.py``."""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import cluster.storage
from cluster.storage import (
    DuplicateRequest,
    JournalEntry,
    RunInfo,
    SCHEMA_VERSION,
    SchemaTooNew,
    SqliteStore,
    StoreCorrupted,
    StoreReadOnly,
    StoreWriteFailed,
)
from tests._disks import small_disk
from tests._stores import batch_entry as entry
from tests._stores import run_info as info
from tests._waits import HANG_GUARD_S




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


# -- the file ------------------------------------------------------------------------


def test_new_file_and_parent_directory_are_created_in_wal_mode(path: Path, store: SqliteStore) -> None:
    assert path.exists()
    assert store.path == str(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_run_info_repr_hides_owner_token() -> None:
    assert "s3cret" not in repr(info()) and "s3cret" not in str(info())


# -- crash ----------------------------------------------------


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


def test_file_from_a_newer_schema_raises_schema_too_new(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite"
    good_file(path)
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 99")
    raw.commit()
    raw.close()
    before = digest(path)
    with pytest.raises(SchemaTooNew, match=rf"{path} has schema version 99, .* supports schema version 3 .* upgrade soloist"):
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


def test_a_process_on_sqlite_never_loads_the_postgresql_driver(tmp_path: Path) -> None:
    # psycopg and its pool cost each process about 70 ms and 9.6 MB; the default store needs neither.
    code = textwrap.dedent(f"""
        import sys
        import actors, cluster.cli, coordinators
        from cluster.storage import JournalEntry, RunInfo, open_store
        store = open_store({str(tmp_path / "s.sqlite")!r}, durability="batch")
        store.create_run(RunInfo(name="r", state_type="x", created_at=0.0, owner_token="t"), {{}})
        store.append("r", [JournalEntry(version=1, request_id="a", kind="fn", payload={{}}, created_at=0.0)]).result()
        store.close()
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("psycopg", "psycopg_pool")))
        import cluster.storage
        print(cluster.storage.PostgresStore.__name__, "psycopg" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.splitlines() == ["[]", "PostgresStore True"]
    with pytest.raises(AttributeError, match="has no attribute 'PostgreStore'"):
        cluster.storage.PostgreStore  # noqa: B018 - a misspelt name is still an AttributeError
