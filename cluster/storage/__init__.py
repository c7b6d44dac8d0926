"""Durable storage of runs: the store interface, SQLite, PostgreSQL and in-memory stores, state diffs.

Pure Python (no Ray): the orchestrator actor calls a store from its event loop, so
``append`` never blocks on disk and everything else should run in a worker thread.
"""

from __future__ import annotations

import os

from .base import (
    AgentRecordRow,
    Checkpoint,
    Durability,
    JournalEntry,
    RunInfo,
    Store,
    StoreHealth,
    StoreStatistics,
)
from .diff import apply_diff, diff_states
from .exceptions import (
    DuplicateRequest,
    JournalGap,
    RunExists,
    RunLockedElsewhere,
    RunNotFound,
    SchemaTooNew,
    StoreClosed,
    StoreCorrupted,
    StoreError,
    StoreReadOnly,
    StoreUnreachable,
    StoreWriteFailed,
    VersionCompacted,
    WriterFenced,
)
from .gc import FINISHED_STATUSES, FinalStatus, GcReport, finished_runs, parse_age, remove_finished_runs
from .memory import MemoryStore
from ._replay import replay
from .postgres import PostgresStore
from .sqlite import SCHEMA_VERSION, SqliteStore
from ._url import is_postgres_url, redact

__all__ = [
    "SCHEMA_VERSION",
    "AgentRecordRow",
    "Checkpoint",
    "DuplicateRequest",
    "Durability",
    "JournalEntry",
    "JournalGap",
    "MemoryStore",
    "PostgresStore",
    "RunExists",
    "RunInfo",
    "RunLockedElsewhere",
    "RunNotFound",
    "SchemaTooNew",
    "SqliteStore",
    "Store",
    "StoreClosed",
    "StoreCorrupted",
    "StoreError",
    "StoreReadOnly",
    "StoreHealth",
    "StoreStatistics",
    "StoreUnreachable",
    "StoreWriteFailed",
    "VersionCompacted",
    "WriterFenced",
    "FINISHED_STATUSES",
    "FinalStatus",
    "GcReport",
    "finished_runs",
    "parse_age",
    "remove_finished_runs",
    "apply_diff",
    "diff_states",
    "open_store",
    "is_postgres_url",
    "redact",
    "replay",
]


def open_store(
    spec: str | os.PathLike[str] | Store | None, *, durability: Durability = "sync"
) -> Store | None:
    """None -> None (no storage); a store -> itself; a ``postgresql://`` (or ``postgres://``)
    URL -> a :class:`PostgresStore`; a path -> a :class:`SqliteStore`."""
    if spec is None:
        return None
    if is_postgres_url(spec):
        return PostgresStore(str(spec), durability=durability)
    if isinstance(spec, (str, os.PathLike)):
        return SqliteStore(spec, durability=durability)
    if isinstance(spec, Store):
        return spec
    raise TypeError(f"store must be a path, a postgresql:// URL, a Store or None, not {type(spec).__name__}")
