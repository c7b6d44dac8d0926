"""The SQLite store: one file, WAL mode, ``synchronous=FULL``, a group-commit writer.

Every write (appends, checkpoints, agent records, new runs) is an operation for the
:class:`~._writer.GroupCommitWriter`, whose thread owns the only write connection and
commits whatever is queued in one transaction (one fsync). Readers use one read-only
connection per thread. Opening an existing file checks it first, read-only
(:func:`~._schema.validate_file`); a bad file raises and is never written to. The store's
behaviour is :class:`~._sqlbase.SqlStore`'s; this module supplies the file.
"""

from __future__ import annotations

import atexit
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ._claims import WriterClaim, claim, lock_briefly, remove_lock, unlock
from ._gate import WriteGate
from ._schema import SCHEMA_VERSION, open_connection, open_writer, translate, validate_file
from ._sqlbase import SqlStore
from ._writer import GroupCommitWriter
from .base import Durability, StoreHealth
from .exceptions import StoreClosed, StoreError, StoreReadOnly

__all__ = ["SCHEMA_VERSION", "SqliteStore"]

logger = logging.getLogger(__name__)
_LOG = {"component": "store"}
T = TypeVar("T")


def _open_connection(path: str, *, writer: bool) -> sqlite3.Connection:
    """Open a connection; tests replace this hook to simulate read-only files or full disks."""
    return open_connection(path, writer=writer)


class _SqliteSession:
    """The writer's connection as a :class:`~._writer.WriteSession`: ``BEGIN IMMEDIATE``
    takes the file's write lock; a SQLite connection is never lost, only refused."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._gate = WriteGate(path)
        # Through the gate too: a new file's schema and its switch to WAL (which SQLite refuses
        # at once, without waiting, while another connection opens the file) happen one
        # process at a time, so two hosts opening one new store together both succeed.
        self._gate.enter()
        try:
            self.conn = open_writer(path, _open_connection)
        except BaseException:
            self._gate.close()
            raise
        self._gate.leave()

    def begin(self) -> None:
        # Writers of this file in other processes (a second run host) wait on the gate, not
        # in SQLite's busy handler: they are woken as soon as this transaction ends.
        self._gate.enter()
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._gate.leave()
            raise

    def savepoint(self) -> None:
        self.conn.execute("SAVEPOINT op")

    def release(self) -> None:
        self.conn.execute("RELEASE op")

    def rollback_savepoint(self) -> None:
        self.conn.execute("ROLLBACK TO op")
        self.conn.execute("RELEASE op")

    def commit(self) -> None:
        try:
            self.conn.execute("COMMIT")
        finally:
            if not self.conn.in_transaction:
                self._gate.leave()

    def rollback(self) -> None:
        """Roll back an open transaction after a failure; a failing rollback is logged."""
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error as exc:
                logger.error("rollback failed on %s: %s", self._path, exc, extra=_LOG)
        self._gate.leave()

    def close(self) -> None:
        self.conn.close()
        self._gate.close()

    def lost(self, exc: BaseException) -> bool:
        return False

    def translate(self, exc: BaseException) -> BaseException:
        return translate(exc, self._path, writing=True) if isinstance(exc, sqlite3.Error) else exc


def resolve_path(path: str | os.PathLike[str]) -> str:
    """The absolute file ``path`` names in this process: environment variables resolved here."""
    return os.path.abspath(os.path.expandvars(os.fspath(path)))


def portable_path(path: str | os.PathLike[str]) -> str:
    """``path`` as another process of the run opens it: a path naming environment variables is
    left for that process to resolve (each node its own); any other is made absolute here (a
    worker's current directory need not be this process's)."""
    text = os.fspath(path)
    if os.path.expandvars(text) != text:
        return text
    return os.path.abspath(text)


class SqliteStore(SqlStore):
    """A durable store in one SQLite file (see :class:`~._sqlbase.SqlStore` for durability).

    ``path`` may name environment variables (``$VAR``, ``${VAR}``): each process that opens
    the store resolves them in its own environment, so one path names each node's own file
    (``open_store`` and the run hosts pass such a path on unresolved, see ``portable_path``).

    One writer per run: the orchestrator actor that opens a run for writing holds its
    :meth:`claim_writer` (an OS lock beside the file, dropped when the holder exits however it
    exits). A write to a run this store has not claimed takes that lock for its transaction
    only, and fails with ``RunLockedElsewhere`` while another process holds the claim.
    """

    def __init__(self, path: str | os.PathLike[str], *, durability: Durability = "sync") -> None:
        self._init_common(resolve_path(path), durability)
        self._readers: list[sqlite3.Connection] = []  # every thread's read connection (guarded by _lock)
        self._deleted_locks: dict[int, str] = {}  # brief lock -> its run, deleted in this transaction (writer thread only)
        self._local = threading.local()
        existing = os.path.exists(self._file) and os.path.getsize(self._file) > 0
        if existing:
            validate_file(self._file, _open_connection)
        else:
            try:
                os.makedirs(os.path.dirname(self._file), exist_ok=True)
            except OSError as exc:
                raise StoreReadOnly(path=self._file, problem=f"cannot create directory: {exc}") from exc
        self._writer = GroupCommitWriter(
            self._file, lambda _deadline: _SqliteSession(self._file), after_group=self._unlock_brief
        )
        atexit.register(self.close)
        logger.info(
            "opened store %s (%s, durability=%s)", self._file, "existing" if existing else "new", durability, extra=_LOG
        )

    def health(self) -> StoreHealth:
        """Whether the file answers a trivial read now, and how fast (or the error)."""
        started = time.perf_counter()
        try:
            self._query(lambda conn: conn.execute("SELECT COUNT(*) FROM runs").fetchone())
        except StoreError as exc:
            return StoreHealth(location=self._file, kind="sqlite", reachable=False, error=str(exc))
        return StoreHealth(location=self._file, kind="sqlite", reachable=True, server=f"SQLite {sqlite3.sqlite_version}",
                           latency_ms=(time.perf_counter() - started) * 1000)

    def _query(self, fn: Callable[[sqlite3.Connection], T], *, snapshot: bool = False) -> T:
        """Run ``fn`` on this thread's read connection (one consistent snapshot with ``snapshot``)."""
        if self._closed:
            raise StoreClosed(path=self._file)
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = _open_connection(self._file, writer=False)
            except sqlite3.Error as exc:
                raise translate(exc, self._file, writing=False) from exc
            with self._lock:
                if self._closed:
                    conn.close()
                    raise StoreClosed(path=self._file)
                self._readers.append(conn)
            self._local.conn = conn
        try:
            if snapshot:
                conn.execute("BEGIN")
            return fn(conn)
        except sqlite3.Error as exc:
            raise translate(exc, self._file, writing=False) from exc
        finally:
            if snapshot and conn.in_transaction:
                conn.execute("COMMIT")

    def _claim(self, run: str, holder: dict[str, Any], timeout: float) -> WriterClaim:
        return claim(self._file, run, holder, timeout=timeout)

    def _check_claim(self, run: str) -> None:
        fd = lock_briefly(self._file, run)
        if fd is not None:
            unlock(fd)

    def _lock_briefly(self, conn: sqlite3.Connection, run: str) -> int | None:
        return lock_briefly(self._file, run)

    def _unlock(self, token: Any) -> None:
        run = self._deleted_locks.pop(token, None)
        if run is not None:  # the transaction deleted the run: its lock file goes, still locked
            remove_lock(self._file, run, token)
        unlock(token)

    def delete_run(self, run: str) -> None:
        """Durably delete everything stored for ``run``, its lock file included (removed once the
        deletion's transaction ended: this returns after that); ``RunNotFound`` if not stored."""
        super().delete_run(run)
        self._writer.submit(None).result()  # the next transaction begins once that one's locks were let go

    def _run_deleted(self, conn: sqlite3.Connection, run: str) -> None:
        # The lock file is removed once the deletion's transaction ended, before its lock is
        # let go (removed sooner, a writer could claim a new file while this one still writes).
        claimed = self._claims.get(run)
        if isinstance(claimed, WriterClaim):
            claimed.run_deleted()
        elif run in self._brief:
            self._deleted_locks[self._brief[run]] = run

    def _close_resources(self) -> None:
        with self._lock:
            readers, self._readers = self._readers, []
        for conn in readers:
            conn.close()
        atexit.unregister(self.close)
