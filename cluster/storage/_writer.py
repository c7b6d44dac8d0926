"""The group-commit writer: one thread, the only write connection, one transaction per group.

Callers queue operations (``fn(conn)``) and get futures. The thread drains everything
queued so far into ONE transaction, runs each operation inside its own savepoint (whatever
an operation raises rolls back that operation alone and fails only its future; a group of one
operation needs none), commits, and
only then resolves the futures, so concurrent callers share one commit (one fsync). If the
transaction itself fails (full disk, read-only file, I/O error), every operation it
carried fails with the translated error and nothing of it is stored.

Consecutive operations that are :class:`Mergeable` with one key (one run's appends) run as
ONE operation, in one savepoint: a run's appends queued while the previous transaction ran
cost one set of checks and one insert instead of one each. If the merged operation fails
with a ``StoreError``, it is rolled back and each operation runs on its own, so each gets
its own outcome, as without merging.

The connection is a :class:`WriteSession` (SQLite, PostgreSQL). When a session reports
the connection *lost* (a database server restarting), the writer opens a new one and runs
the whole group again in a new transaction, with :attr:`GroupCommitWriter.retrying` set so
operations recognise their own earlier commit (the journal's request ids make appends
exactly-once). It keeps trying for the session's retry time, then fails the group with the
session's ``unreachable`` error and tries afresh for the next group.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .exceptions import StoreClosed, StoreError

logger = logging.getLogger(__name__)
_LOG = {"component": "store"}

Operation = Callable[[Any], Any]


class Mergeable:
    """An operation that may run as one with the operations of the same ``merge_key``
    queued right after it (e.g. the appends of one run). A base class, not a runtime
    protocol: the writer asks every queued operation, and a protocol's ``isinstance`` costs
    about 9 us where a class's costs well under one."""

    merge_key: Hashable

    def __call__(self, conn: Any) -> Any:
        raise NotImplementedError

    def merged(self, later: Sequence[Any]) -> Callable[[Any], list[Any]]:
        """One operation doing ``self`` then each of ``later`` (same key); it returns the
        result of each, in order."""
        raise NotImplementedError


def _units(ops: list["_Op"]) -> list[list["_Op"]]:
    """``ops`` cut into runs of consecutive operations to run as one (a run of one: alone)."""
    units: list[list[_Op]] = []
    key: Hashable = None
    for op in ops:
        mergeable = isinstance(op.fn, Mergeable)
        if mergeable and units and key is not None and op.fn.merge_key == key:  # type: ignore[union-attr]
            units[-1].append(op)
            continue
        units.append([op])
        key = op.fn.merge_key if mergeable else None  # type: ignore[union-attr]
    return units


class WriteSession(Protocol):
    """The write connection of one store, as the writer drives it. ``conn`` is what each
    operation receives; ``lost`` tells a dropped connection (retry the group on a new
    session) from any other failure, which ``translate`` turns into a ``StoreError``."""

    conn: Any

    def begin(self) -> None: ...
    def savepoint(self) -> None: ...
    def release(self) -> None: ...
    def rollback_savepoint(self) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...
    def lost(self, exc: BaseException) -> bool: ...
    def translate(self, exc: BaseException) -> BaseException: ...


class Reconnect(Protocol):
    """Opens a new session, retrying until ``deadline`` (``time.monotonic``); raises the
    store's ``unreachable`` error after it."""

    def __call__(self, deadline: float | None) -> WriteSession: ...


@dataclass
class _Op:
    """One queued write: ``fn`` runs in the group's transaction (None = barrier)."""

    fn: Operation | None
    future: concurrent.futures.Future[Any]


_STOP = _Op(fn=None, future=concurrent.futures.Future())


class _Lost(Exception):
    """The session's connection dropped during a group: run the group again."""


class GroupCommitWriter:
    """Owns the write connection of one store on a background thread."""

    def __init__(
        self,
        path: str,
        connect: Reconnect,
        *,
        retry_for_s: float = 0.0,
        after_group: Callable[[], None] | None = None,
    ) -> None:
        """Start the thread; raise the ``StoreError`` of ``connect`` if it cannot open.
        ``after_group`` runs on the thread after each transaction ends (committed or not)."""
        self._path = path
        self._connect = connect
        self._retry_for_s = retry_for_s
        self._after_group = after_group
        self._queue: queue.SimpleQueue[_Op] = queue.SimpleQueue()
        self._lock = threading.Lock()  # makes "closed" and "queued" one step for submitters
        self._closed = False  # once True, nothing more is queued; _STOP is last in the queue
        self.commits = 0  # operations committed; written by the thread only
        self.fsync_batches = 0  # transactions committed; written by the thread only
        self.reconnects = 0  # sessions opened after a lost connection; written by the thread only
        self.retrying = False  # True while a group runs again after a lost connection (thread only)
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._main, args=(ready,), name=f"soloist-store-writer:{path}", daemon=True)
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

    def _main(self, ready: concurrent.futures.Future[None]) -> None:
        """Open the connection, then commit queued operations in groups until stopped."""
        try:
            session: WriteSession | None = self._connect(None)
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
                    session = self._commit_with_retry(session, [op for op in group if op is not _STOP])
                finally:
                    if self._after_group is not None:
                        self._after_group()
        finally:
            if session is not None:
                session.close()

    def _commit_with_retry(self, session: WriteSession | None, ops: list[_Op]) -> WriteSession | None:
        """Commit ``ops`` as one group, on a new session whenever the connection is lost, for
        up to the retry time; then fail them with the store's ``unreachable`` error."""
        if not any(op.fn for op in ops):
            for op in ops:
                op.future.set_result(None)
            return session
        deadline: float | None = None
        try:
            while True:
                if session is None:
                    if deadline is None:
                        deadline = time.monotonic() + self._retry_for_s
                    try:
                        session = self._connect(deadline)
                    except StoreError as exc:
                        logger.error("store write failed: %s", exc, extra=_LOG)
                        for op in ops:
                            op.future.set_exception(exc)
                        return None
                    self.reconnects += 1
                    self.retrying = True
                    logger.warning("store %s: reconnected; running %d writes again", self._path, len(ops), extra=_LOG)
                try:
                    self._commit_group(session, ops)
                    return session
                except _Lost as lost:
                    logger.warning("store %s: connection lost (%s); retrying the group", self._path, lost, extra=_LOG)
                    session.close()
                    session = None
        finally:
            self.retrying = False

    def _commit_group(self, session: WriteSession, ops: list[_Op]) -> None:
        """Run ``ops`` in one transaction (a savepoint each), commit, resolve their futures;
        raise ``_Lost`` (nothing resolved) when the connection dropped on the way."""
        outcomes: list[tuple[_Op, Any, BaseException | None]] = []
        # A lone operation needs no savepoint: when it fails, the whole transaction is rolled back.
        savepoints = sum(1 for op in ops if op.fn is not None) > 1
        try:
            session.begin()
            aborted = False
            for unit in _units(ops):
                if len(unit) > 1 and self._run_merged(session, unit, outcomes):
                    continue
                for op in unit:
                    if op.fn is None:
                        outcomes.append((op, None, None))
                        continue
                    if savepoints:
                        session.savepoint()
                    try:
                        result = op.fn(session.conn)
                    except Exception as exc:
                        # Whatever one operation raised (a refused write, a value its database
                        # cannot hold, a bug) is that operation's outcome alone: the others of
                        # the group still commit. A lost connection is the group's (retried).
                        if session.lost(exc):
                            raise
                        try:
                            if savepoints:
                                session.rollback_savepoint()
                            else:
                                session.rollback()
                                aborted = True
                        except Exception:
                            raise exc from None  # the transaction went with it (a full disk): the group's failure
                        if not isinstance(exc, StoreError):
                            logger.error("store %s: a write failed on its own: %r", self._path, exc, extra=_LOG)
                        outcomes.append((op, None, exc if isinstance(exc, StoreError) else session.translate(exc)))
                    else:
                        if savepoints:
                            session.release()
                        outcomes.append((op, result, None))
            if not aborted:
                session.commit()
        except Exception as exc:  # a failed transaction fails every operation it carried
            if session.lost(exc):
                raise _Lost(str(exc)) from exc
            error = session.translate(exc)
            logger.error("store write failed: %s", error, exc_info=exc, extra=_LOG)
            session.rollback()
            for op in ops:
                op.future.set_exception(error)
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

    @staticmethod
    def _run_merged(session: WriteSession, unit: list[_Op], outcomes: list[tuple[_Op, Any, BaseException | None]]) -> bool:
        """Run ``unit`` (mergeable operations of one key) as one operation in a savepoint and
        record each one's result; False (rolled back, nothing recorded) when it raised a
        ``StoreError``: the caller then runs them one by one for their own outcomes."""
        first = unit[0].fn
        assert isinstance(first, Mergeable)
        session.savepoint()
        try:
            results = first.merged([op.fn for op in unit[1:]])(session.conn)
        except Exception as exc:
            if session.lost(exc):
                raise
            try:
                session.rollback_savepoint()
            except Exception:
                raise exc from None  # the transaction went with it: the group's failure
            return False
        session.release()
        outcomes.extend((op, result, None) for op, result in zip(unit, results))
        return True
