"""The SQLite file format of a store: schema, connections, checks, error translation.

Kept apart from :mod:`.sqlite` so the store module reads as the store's behaviour. An
existing file is checked read-only, in this order: the SQLite header, the schema version,
``PRAGMA quick_check``, then that it is a soloist store.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from urllib.parse import quote

from .exceptions import (
    SchemaTooNew,
    StoreCorrupted,
    StoreError,
    StoreReadOnly,
    StoreWriteFailed,
)

SCHEMA_VERSION = 3
APPLICATION_ID = 0x736F6C6F  # "solo": marks the file as a soloist store
_MAGIC = b"SQLite format 3\x00"
_TABLES = ("runs", "checkpoints", "journal", "requests", "agents")
_TABLES_SINCE = {"activations": 2, "blobs": 3}  # tables a newer schema added, opened files get them at open
# Schema 2: each run's fencing epoch. Every activation of a run (an orchestrator taking it
# up) raises the epoch by one; writes of an older activation are refused from then on.
_ACTIVATIONS = "CREATE TABLE IF NOT EXISTS activations(run TEXT PRIMARY KEY, epoch INTEGER NOT NULL, holder TEXT NOT NULL, since REAL NOT NULL);"
# Schema 3: long metadata values (a run's pickled caller and state class) stored once per
# store under their digest, however many runs share them; a run's row holds the digest.
_BLOBS = "CREATE TABLE IF NOT EXISTS blobs(digest TEXT PRIMARY KEY, text TEXT NOT NULL);"
_SCHEMA = f"""
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS runs(name TEXT PRIMARY KEY, state_type TEXT NOT NULL, created_at REAL NOT NULL,
                  owner_token TEXT NOT NULL, metadata TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints(run TEXT NOT NULL, version INTEGER NOT NULL, state TEXT NOT NULL,
                         created_at REAL NOT NULL, PRIMARY KEY (run, version));
CREATE TABLE IF NOT EXISTS journal(run TEXT NOT NULL, version INTEGER NOT NULL, request_id TEXT NOT NULL,
                     kind TEXT NOT NULL, payload TEXT NOT NULL, created_at REAL NOT NULL,
                     PRIMARY KEY (run, version));
CREATE TABLE IF NOT EXISTS requests(run TEXT NOT NULL, request_id TEXT NOT NULL, version INTEGER NOT NULL,
                      PRIMARY KEY (run, request_id));
CREATE INDEX IF NOT EXISTS requests_by_version ON requests(run, version);
CREATE TABLE IF NOT EXISTS agents(run TEXT NOT NULL, agent_id TEXT NOT NULL, record TEXT NOT NULL,
                    updated_at REAL NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (run, agent_id));
CREATE INDEX IF NOT EXISTS agents_by_seq ON agents(run, seq);
{_ACTIVATIONS}
{_BLOBS}
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {SCHEMA_VERSION};
COMMIT;
"""


def open_connection(path: str, *, writer: bool) -> sqlite3.Connection:
    """Open an autocommit connection: read-write-create for the writer, read-only otherwise."""
    mode = "rwc" if writer else "ro"
    return sqlite3.connect(
        f"file:{quote(path)}?mode={mode}",
        uri=True,
        isolation_level=None,
        check_same_thread=False,
        timeout=10.0,
    )


def translate(exc: sqlite3.Error, path: str, *, writing: bool) -> StoreError:
    """Map a SQLite error to the store error that names the file and the problem."""
    name = getattr(exc, "sqlite_errorname", "")
    text = f"{exc} ({name})" if name else str(exc)
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in str(exc):
        return StoreCorrupted(path=path, problem=text)
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")) or "readonly" in str(exc):
        return StoreReadOnly(path=path, problem=text)
    if writing:
        return StoreWriteFailed(path=path, problem=text)
    return StoreError(f"could not read store {path}: {text}", path=path)


def open_writer(path: str, opener: Callable[..., sqlite3.Connection]) -> sqlite3.Connection:
    """The write connection in WAL/FULL mode, with the schema created on a new file."""
    try:
        conn = opener(path, writer=True)
        try:
            (mode,) = conn.execute("PRAGMA journal_mode=WAL").fetchone()
            conn.execute("PRAGMA synchronous=FULL")
            if mode.lower() != "wal":
                raise StoreWriteFailed(path=path, problem=f"cannot enable WAL (journal mode {mode})")
            if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone():
                conn.executescript(_SCHEMA)  # one transaction: tables, ids, schema version
            else:
                _migrate(conn)
        except BaseException:
            conn.close()
            raise
    except sqlite3.Error as exc:
        raise translate(exc, path, writing=True) from exc
    return conn


_MIGRATIONS = {
    1: f"BEGIN IMMEDIATE; {_ACTIVATIONS} PRAGMA user_version = 2; COMMIT;",
    2: f"BEGIN IMMEDIATE; {_BLOBS} PRAGMA user_version = 3; COMMIT;",
}


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring a file of an older schema to this one, one version per transaction (a newer
    soloist opens an older store in place; an older soloist then refuses it: SchemaTooNew)."""
    while True:
        (found,) = conn.execute("PRAGMA user_version").fetchone()
        if found >= SCHEMA_VERSION:
            return
        conn.executescript(_MIGRATIONS[found])


def validate_file(path: str, opener: Callable[..., sqlite3.Connection]) -> None:
    """Check an existing file, read-only: header, schema version, quick_check, tables."""
    with open(path, "rb") as handle:
        header = handle.read(100)
    if len(header) < 100 or not header.startswith(_MAGIC):
        raise StoreCorrupted(path=path, problem="not a SQLite database (bad or short header)")
    try:
        conn = opener(path, writer=False)
        try:
            (found,) = conn.execute("PRAGMA user_version").fetchone()
            if found > SCHEMA_VERSION:
                raise SchemaTooNew(path=path, found=found, supported=SCHEMA_VERSION)
            (app,) = conn.execute("PRAGMA application_id").fetchone()
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            problems = [r[0] for r in conn.execute("PRAGMA quick_check(5)")]
        finally:
            conn.close()
    except sqlite3.Error as exc:  # "file is not a database", "disk image is malformed", ...
        raise translate(exc, path, writing=False) from exc
    if problems != ["ok"]:
        raise StoreCorrupted(path=path, problem="quick_check failed: " + "; ".join(problems))
    if not tables:
        return  # an empty SQLite file: the writer creates the schema
    expected = [*_TABLES, *(t for t, since in _TABLES_SINCE.items() if found >= since)]
    missing = [t for t in expected if t not in tables]
    if app != APPLICATION_ID or found not in _MIGRATIONS and found != SCHEMA_VERSION or missing:
        raise StoreCorrupted(
            path=path,
            problem=f"not a soloist store (application_id {app}, schema {found}, missing tables {missing})",
        )
