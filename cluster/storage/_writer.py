"""The group-commit writer: one thread, the only write connection, one fsync per group.

Callers queue operations (``fn(conn)``) and get futures. The thread drains everything
queued so far into ONE transaction, runs each operation inside its own savepoint (a
``StoreError`` rolls back that operation alone and fails only its future), commits, and
only then resolves the futures, so concurrent callers share one WAL fsync. If the
transaction itself fails (full disk, read-only file, I/O error), every operation it
carried fails with the translated error and nothing of it is stored.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._gate import WriteGate
from ._schema import translate
from .exceptions import StoreClosed, StoreError

logger = logging.getLogger(__name__)
_LOG = {"component": "store"}

Operation = Callable[[sqlite3.Connection], Any]


@dataclass
class _Op:
    """One queued write: ``fn`` runs in the group's transaction (None = barrier)."""

    fn: Operation | None
    future: concurrent.futures.Future[Any]


_STOP = _Op(fn=None, future=concurrent.futures.Future())


class GroupCommitWriter:
    """Owns the write connection of one store file on a background thread."""

    def __init__(
        self,
        path: str,
        connect: Callable[[], sqlite3.Connection],
        *,
        after_group: Callable[[], None] | None = None,
        gate: WriteGate | None = None,
    ) -> None:
        """Start the thread; raise the ``StoreError`` of ``connect`` if it cannot open.
        ``after_group`` runs on the thread after each transaction ends (committed or not);
        ``gate``, when given, is held for each transaction that writes."""
        self._path = path
        self._after_group = after_group
        self._gate = gate
        self._queue: queue.SimpleQueue[_Op] = queue.SimpleQueue()
        self._lock = threading.Lock()  # makes "closed" and "queued" one step for submitters
        self._closed = False  # once True, nothing more is queued; _STOP is last in the queue
        self.commits = 0  # operations committed; written by the thread only
        self.fsync_batches = 0  # transactions committed; written by the thread only
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._main, args=(connect, ready), name=f"soloist-store-writer:{path}", daemon=True
        )
        self._thread.start()
        ready.result()

    def submit(self, fn: Operation | None) -> concurrent.futures.Future[Any]:
        """Queue ``fn`` (None: a barrier that resolves once everything before it is durable)."""
        op = _Op(fn=fn, future=concurrent.futures.Future())
        with self._lock:
            if self._closed:
                op.future.set_exception(StoreClosed(path=self._path))
            else:
                self._queue.put(op)
        return op.future

    def close(self) -> None:
        """Commit what is queued, stop the thread and close the connection; idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._queue.put(_STOP)
        self._thread.join()

    def _main(self, connect: Callable[[], sqlite3.Connection], ready: concurrent.futures.Future[None]) -> None:
        """Open the connection, then commit queued operations in groups until stopped."""
        try:
            conn = connect()
        except StoreError as exc:
            with self._lock:
                self._closed = True
            ready.set_exception(exc)
            return
        ready.set_result(None)
        try:
            stop = False
            while not stop:
                group = [self._queue.get()]
                while True:
                    try:
                        group.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                stop = any(op is _STOP for op in group)
                try:
                    self._commit_group(conn, [op for op in group if op is not _STOP])
                finally:
                    if self._after_group is not None:
                        self._after_group()
        finally:
            conn.close()

    def _commit_group(self, conn: sqlite3.Connection, ops: list[_Op]) -> None:
        """Run ``ops`` in one transaction (a savepoint each), commit, resolve their futures."""
        writes = any(op.fn for op in ops)
        if writes and self._gate is not None:
            self._gate.enter()
        try:
            outcomes = self._run_group(conn, ops, writes)
        finally:
            if writes and self._gate is not None:
                self._gate.leave()
        if outcomes is None:
            return
        committed = sum(1 for op, _, failure in outcomes if failure is None and op.fn is not None)
        if committed:
            self.commits += committed
            self.fsync_batches += 1
            logger.debug("committed %d operations in one transaction", committed, extra=_LOG)
        for op, result, failure in outcomes:
            if failure is None:
                op.future.set_result(result)
            else:
                op.future.set_exception(failure)

    def _run_group(
        self, conn: sqlite3.Connection, ops: list[_Op], writes: bool
    ) -> list[tuple[_Op, Any, StoreError | None]] | None:
        """The transaction of ``_commit_group``: each op's outcome, or None when the
        transaction itself failed (then every op's future has failed already)."""
        outcomes: list[tuple[_Op, Any, StoreError | None]] = []
        try:
            if writes:
                conn.execute("BEGIN IMMEDIATE")
            for op in ops:
                if op.fn is None:
                    outcomes.append((op, None, None))
                    continue
                conn.execute("SAVEPOINT op")
                try:
                    result = op.fn(conn)
                except StoreError as exc:
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    outcomes.append((op, None, exc))
                else:
                    conn.execute("RELEASE op")
                    outcomes.append((op, result, None))
            if conn.in_transaction:
                conn.execute("COMMIT")
        except Exception as exc:  # a failed transaction fails every operation it carried
            error = translate(exc, self._path, writing=True) if isinstance(exc, sqlite3.Error) else exc
            logger.error("store write failed: %s", error, exc_info=exc, extra=_LOG)
            self._rollback(conn)
            for op in ops:
                op.future.set_exception(error)
            return None
        return outcomes

    def _rollback(self, conn: sqlite3.Connection) -> None:
        """Roll back an open transaction after a failure; a failing rollback is logged."""
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error as exc:
                logger.error("rollback failed on %s: %s", self._path, exc, extra=_LOG)
