"""A store of many runs for the paging tests of ``soloist status`` and the runs page.

Runs are created straight through the store (no orchestrator), many writes in flight at
once so the store's group commit puts them in few transactions. Run ``i`` is named
``run-{i:05d}``, created at ``BASE_TIME + i`` (so newest first is descending ``i``), and
has the status ``STATUSES[i % len(STATUSES)]`` in its metadata (None: no status recorded).
"""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cluster.storage import JournalEntry, RunInfo, SqliteStore, diff_states

__all__ = ["BASE_TIME", "STATUSES", "name_of", "status_of", "expected_counts", "make_store", "break_run"]

BASE_TIME = 1_700_000_000.0
STATUSES = ("complete", "complete", "complete", "running", "running", "waiting", "stopped", "max_turns", "cancelled", None)
_UPDATED_LATER = 10  # the first runs get their status through update_run_metadata, as a Run records it


def name_of(i: int) -> str:
    return f"run-{i:05d}"


def status_of(i: int) -> str:
    return STATUSES[i % len(STATUSES)] or "none"


def expected_counts(count: int) -> dict[str, int]:
    return dict(Counter(status_of(i) for i in range(count)))


def make_store(path: Path, count: int, *, versions: dict[int, int] | None = None) -> None:
    """Create ``count`` runs in a new store at ``path``; run ``i`` of ``versions`` gets that
    many journal entries (every other run stays at version 0). The store is closed after."""
    store = SqliteStore(path)
    try:
        def create(i: int) -> None:
            status = STATUSES[i % len(STATUSES)]
            metadata = {} if status is None or i < _UPDATED_LATER else {"status": status}
            store.create_run(RunInfo(name=name_of(i), state_type="tests.many.State", created_at=BASE_TIME + i,
                                     owner_token="token", metadata=metadata), {"n": i})
            if status is not None and i < _UPDATED_LATER:
                store.update_run_metadata(name_of(i), {"status": status, "finished_at": BASE_TIME + i})

        with ThreadPoolExecutor(max_workers=64) as pool:
            list(pool.map(create, range(count)))
        for i, last in (versions or {}).items():
            store.append(name_of(i), [JournalEntry(version=v, request_id=f"r{v}", kind="fn", created_at=BASE_TIME + i,
                                                   payload=diff_states({"n": i + v - 1}, {"n": i + v}))
                                      for v in range(1, last + 1)]).result()
            store.put_agent(name_of(i), "coordinator:a", {"kind": "coordinator", "lifecycle": "idle"})
    finally:
        store.close()


def break_run(path: Path, i: int) -> None:
    """Make run ``i`` unreadable in full: its journal payloads and agent records are no longer
    JSON (the run table, its metadata and its versions stay intact)."""
    name = name_of(i)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT OR REPLACE INTO journal VALUES (?, 1, 'broken', 'fn', 'not json {', ?)", (name, BASE_TIME))
        conn.execute("INSERT OR REPLACE INTO requests VALUES (?, 'broken', 1)", (name,))
        conn.execute("INSERT OR REPLACE INTO agents VALUES (?, 'coordinator:a', 'not json {', ?, 1)", (name, BASE_TIME))
    conn.close()


BIG = 20_000
"""Runs in the big store of the paging tests (one with 3 versions, see ``big_store``)."""


def big_store(directory: Path) -> Path:
    """A store of ``BIG`` runs in ``directory``: run 19,870 has 3 versions, the others none."""
    path = directory / "runs.sqlite"
    make_store(path, BIG, versions={19_870: 3})
    return path


def copy_of(store: Path, directory: Path, *, broken: int | None = None) -> Path:
    """A copy of ``store`` a test may damage; with ``broken``, that run cannot be read in full."""
    path = directory / "runs.sqlite"
    shutil.copy(store, path)
    if broken is not None:
        break_run(path, broken)
    return path
