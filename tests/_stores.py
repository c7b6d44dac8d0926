"""Where a storage test's stores live: a SQLite file, a PostgreSQL schema, or memory.

The storage suite runs on every kind (``tests/cluster/conftest.py`` builds the fixtures on
this); :class:`StoreLocation` opens more stores on one location (a reopen, a second writer)
and reaches the rows behind the store's back.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cluster.storage import JournalEntry, MemoryStore, PostgresStore, RunInfo, SqliteStore, Store
from tests._postgres import PostgresServer

__all__ = ["ALL_KINDS", "SQL_KINDS", "StoreLocation", "batch_entry", "run_info"]

SQL_KINDS = ["sqlite", "postgres"]
ALL_KINDS = ["memory", "sqlite", "postgres"]


class StoreLocation:
    """Where the stores of one test live: a SQLite file or a PostgreSQL schema (or memory)."""

    def __init__(self, kind: str, location: str | None, server: PostgresServer | None = None) -> None:
        self.kind = kind
        self.location = location  # a path, a URL (with its password, if any), or None for memory
        self.server = server
        self._memory: MemoryStore | None = None
        self._opened: list[Store] = []

    def open(self, **options: Any) -> Any:
        """A new store object on this location (memory: the same one each time)."""
        if self.kind == "memory":
            self._memory = self._memory or MemoryStore()
            return self._memory
        store: Store = (SqliteStore if self.kind == "sqlite" else PostgresStore)(self.location, **options)  # type: ignore[arg-type]
        self._opened.append(store)
        return store

    @contextmanager
    def raw(self) -> Iterator[Any]:
        """A plain connection to the rows (autocommit), to damage or count them directly."""
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.location, isolation_level=None)  # type: ignore[arg-type]
            try:
                yield conn
            finally:
                conn.close()
        else:
            assert self.server is not None and self.location is not None
            with self.server.connect(self.location) as conn:
                yield conn

    def count(self, sql: str) -> int:
        """The one number a ``SELECT COUNT(*) ...`` of the rows answers."""
        with self.raw() as conn:
            return int(conn.execute(sql).fetchone()[0])

    def close_all(self) -> None:
        for store in self._opened:
            store.close()
        if self._memory is not None:
            self._memory.close()


def run_info(name: str = "run") -> RunInfo:
    """A run's info as the storage tests store it (its token must never show in a repr)."""
    return RunInfo(name=name, state_type="mymod.MyState", created_at=time.time(), owner_token="s3cret", metadata={"k": 1})


def batch_entry(version: int, request_id: str | None = None, payload: Any = None) -> JournalEntry:
    """A ``batch`` journal entry; its request id is ``req-<version>`` unless given."""
    return JournalEntry(
        version=version,
        request_id=request_id or f"req-{version}",
        kind="batch",
        payload=payload if payload is not None else [{"transition_type": "update_state", "v": version}],
        created_at=time.time(),
    )
