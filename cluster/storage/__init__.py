"""Durable storage of runs: the store interface, SQLite, PostgreSQL and in-memory stores, state diffs.

Pure Python (no Ray): the orchestrator actor calls a store from its event loop, so
``append`` never blocks on disk and everything else should run in a worker thread.
"""

from __future__ import annotations

import os
import typing

from .base import (
    AgentRecordRow,
    DURABILITY_MODES,
    Checkpoint,
    Durability,
    JournalEntry,
    RunInfo,
    Store,
    StoreHealth,
    StoreStatistics,
    check_durability,
    check_request_id,
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
from .sqlite import SCHEMA_VERSION, SqliteStore, portable_path, resolve_path
from ._url import is_postgres_url, redact

if typing.TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = [
    "SCHEMA_VERSION",
    "AgentRecordRow",
    "Checkpoint",
    "DuplicateRequest",
    "DURABILITY_MODES",
    "Durability",
    "check_durability",
    "check_request_id",
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
    "portable_path",
    "resolve_path",
    "is_postgres_url",
    "redact",
    "replay",
]


_S = typing.TypeVar("_S", bound=Store)


@typing.overload
def open_store(spec: None, *, durability: Durability = "sync") -> None: ...
@typing.overload
def open_store(spec: str | os.PathLike[str], *, durability: Durability = "sync") -> SqliteStore | PostgresStore: ...
@typing.overload
def open_store(spec: _S, *, durability: Durability = "sync") -> _S: ...
def open_store(
    spec: str | os.PathLike[str] | Store | None, *, durability: Durability = "sync"
) -> Store | None:
    """None -> None (no storage); a store -> itself; a ``postgresql://`` (or ``postgres://``)
    URL -> a :class:`PostgresStore`; a path -> a :class:`SqliteStore`."""
    if spec is None:
        return None
    if is_postgres_url(spec):
        return _postgres_store()(str(spec), durability=durability)
    if isinstance(spec, (str, os.PathLike)):
        return SqliteStore(spec, durability=durability)
    if isinstance(spec, Store):
        return spec
    raise TypeError(f"store must be a path, a postgresql:// URL, a Store or None, not {type(spec).__name__}")


def _postgres_store() -> type[PostgresStore]:
    # Loaded on first use, not with this package: psycopg and its pool cost each process that
    # imports soloist about 70 ms and 9.6 MB of memory, and SQLite (the default) never needs them.
    from .postgres import PostgresStore

    return PostgresStore


def __getattr__(name: str) -> typing.Any:
    """``PostgresStore``, imported when first asked for (see ``_postgres_store``)."""
    if name == "PostgresStore":
        return _postgres_store()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "PostgresStore"})
