"""One writer per run, the database side of it: writer claims and fencing epochs.

:class:`SingleWriter` is the part of :class:`~._sqlbase.SqlStore` that keeps a run to one
writer. A *claim* (``claim_writer``) is held by the run's orchestrator for as long as it has
the run open; how it is held is the database's (an OS lock beside a SQLite file, an advisory
lock on a PostgreSQL server), supplied by the hooks below. An *activation* (``activate``)
raises the run's fencing epoch in the store, and every write checks it inside its own
transaction (``_fence``), so a superseded writer never commits again (``WriterFenced``).
"""

from __future__ import annotations

import concurrent.futures
import secrets
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ._writer import GroupCommitWriter
from .base import dump_json
from .exceptions import StoreClosed, WriterFenced

__all__ = ["Claim", "SingleWriter"]

T = TypeVar("T")
_IDENTITY = "activation"  # the key of an activation's identity in its recorded holder
Conn = Any  # a DB-API connection whose ``execute(sql, params)`` returns a cursor ("?" placeholders)


class Claim(Protocol):
    """The right to write one run, held until ``release()`` (or until its holder ends)."""

    def release(self) -> None: ...


class SingleWriter:
    """Claims and fencing over the store's tables ``activations`` and the database's locks."""

    _SHARE = ""  # appended to the fencing read: a row lock where the database has one
    _file: str
    _closed: bool
    _writer: GroupCommitWriter
    _claims: dict[str, Claim]  # runs this store writes as their one writer
    _brief: dict[str, Any]  # runs locked for the current transaction (writer thread only)
    _epochs: dict[str, int]  # runs this store writes as their activation of that epoch
    _activations: dict[str, str]  # ... and the holder record (with its identity) that activation wrote

    # -- what a database supplies -------------------------------------------------------

    def _claim(self, run: str, holder: dict[str, Any], timeout: float) -> Claim:
        """Take the run's writer claim or raise ``RunLockedElsewhere`` naming the holder."""
        raise NotImplementedError

    def _check_claim(self, run: str) -> None:
        """Raise ``RunLockedElsewhere`` when someone else holds the run's claim."""
        raise NotImplementedError

    def _lock_briefly(self, conn: Conn, run: str) -> Any:
        """Lock a run nobody here claimed for this transaction (``RunLockedElsewhere`` if
        claimed elsewhere); return what ``_unlock`` releases after it, or None."""
        raise NotImplementedError

    def _unlock(self, token: Any) -> None:
        """Release what ``_lock_briefly`` returned."""

    def _query(self, fn: Callable[[Conn], T], *, snapshot: bool = False) -> T:
        """A read of the store (``SqlStore`` and its database supply it)."""
        raise NotImplementedError

    def _parse(self, text: str, where: str) -> Any:
        """A stored JSON column, decoded (``SqlStore`` supplies it)."""
        raise NotImplementedError

    # -- claims and activations -----------------------------------------------------------

    def claim_writer(self, run: str, *, holder: dict[str, Any], timeout: float = 2.0) -> None:
        """Become the run's one writer until :meth:`release_writer`, :meth:`close` or the end
        of this process. Waits up to ``timeout`` seconds for a holder to let go (a dying
        process, a transaction in flight), then raises ``RunLockedElsewhere`` naming the
        holder. ``holder`` (e.g. the Ray address) is recorded for whoever is refused next.
        The run need not be stored yet (claim before ``create_run``)."""
        if self._closed:
            raise StoreClosed(path=self._file)
        if run in self._claims:
            return
        self._claims[run] = self._claim(run, holder, timeout)

    def check_writer(self, run: str) -> None:
        """Raise ``RunLockedElsewhere`` naming the holder when another process (or another
        store object) holds the run's claim; return when nobody does (nothing is kept)."""
        if run not in self._claims:
            self._check_claim(run)

    def release_writer(self, run: str) -> None:
        """Stop being the run's writer (idempotent); other processes may then claim it."""
        claimed = self._claims.pop(run, None)
        if claimed is not None:
            claimed.release()

    def activate(self, run: str, *, holder: dict[str, Any]) -> int:
        """Take the run up as its newest activation: raise its fencing epoch by one (durably)
        and return it. From then on every write of this store to the run first checks, in
        the same transaction, that the epoch is still this one, so a writer superseded by a
        later activation (a host presumed dead, another driver) can never commit again
        (``WriterFenced``). The run need not be stored yet. ``holder`` is recorded for the
        error a superseded writer gets."""
        epoch: int = self.activate_async(run, holder=holder).result()
        return epoch

    def activate_async(self, run: str, *, holder: dict[str, Any]) -> concurrent.futures.Future[int]:
        """``activate`` without waiting: the future of the epoch. Writes queued after this call
        are fenced with the new epoch, and join its transaction when they are queued before
        it begins (a new run's activation and its creation then share one commit)."""
        if self._closed:
            raise StoreClosed(path=self._file)
        # This activation's own identity, recorded with its holder: a retry after a lost
        # connection recognises its own commit by it. By the epoch number alone it could not
        # tell its commit from another writer's activation that took the same number after its
        # own transaction rolled back, and two writers would then pass every fence.
        identity = secrets.token_hex(16)
        record = dump_json({**holder, _IDENTITY: identity}, "activation holder")

        def op(conn: Conn) -> int:
            if self._writer.retrying and run in self._epochs:
                row = conn.execute("SELECT epoch, holder FROM activations WHERE run = ?", (run,)).fetchone()
                if row is not None and int(row[0]) == self._epochs[run] and row[1] == record:
                    return self._epochs[run]  # this very activation committed before the connection was lost
            (epoch,) = conn.execute(
                "INSERT INTO activations VALUES (?, 1, ?, ?) ON CONFLICT (run) DO UPDATE SET "
                "epoch = activations.epoch + 1, holder = excluded.holder, since = excluded.since RETURNING epoch",
                (run, record, time.time()),
            ).fetchone()
            self._epochs[run] = int(epoch)  # on the writer thread: the next queued write is fenced with it
            self._activations[run] = record
            return int(epoch)

        return self._writer.submit(op)

    def deactivate(self, run: str) -> None:
        """Stop writing the run as its activation (unloaded or closed); the epoch stays, so the
        next activation, here or anywhere, supersedes this one. Idempotent."""
        self._epochs.pop(run, None)
        self._activations.pop(run, None)

    def activation(self, run: str) -> tuple[int, dict[str, Any]] | None:
        """The run's current ``(epoch, holder)``, or None if it was never activated."""
        row = self._query(lambda conn: conn.execute("SELECT epoch, holder FROM activations WHERE run = ?", (run,)).fetchone())
        return (int(row[0]), self._holder(row[1], run)) if row else None

    def _holder(self, text: str, run: str) -> dict[str, Any]:
        """An activation's holder as it recorded itself (without the activation's identity)."""
        holder: dict[str, Any] = self._parse(text, f"activation of run {run!r}")
        holder.pop(_IDENTITY, None)
        return holder

    def _fence(self, run: str, conn: Conn) -> None:
        """Inside a write (writer thread): refuse it when this store activated the run and a
        later activation superseded it (``WriterFenced``); else unless this store holds the
        run's claim or nobody does (then hold the lock until this transaction ends)."""
        if run in self._epochs:
            # Fenced by the epoch alone: the holder of the claim, if any, is superseded.
            self._check_epoch(run, self._activation_row(run, conn))
        if self._fence_locks(run):
            token = self._lock_briefly(conn, run)
            if token is not None:
                self._brief[run] = token

    def _fence_locks(self, run: str) -> bool:
        """Whether ``_fence`` takes the run's lock for this transaction: neither activated nor
        claimed by this store, nor locked by this transaction already."""
        return run not in self._epochs and run not in self._claims and run not in self._brief

    def _activation_row(self, run: str, conn: Conn) -> tuple[Any, ...] | None:
        """The run's ``(epoch, holder)``, read for share: an activation in flight waits for
        this transaction."""
        row: tuple[Any, ...] | None = conn.execute(
            f"SELECT epoch, holder FROM activations WHERE run = ?{self._SHARE}", (run,)).fetchone()
        return row

    def _check_epoch(self, run: str, row: tuple[Any, ...] | None) -> None:
        """``WriterFenced`` when this store activated the run and ``row`` (its activation, read
        in this transaction) is another activation: a later epoch, or the same number taken by
        another writer (the run was deleted and created again, which starts its epochs anew)."""
        epoch = self._epochs.get(run)
        if epoch is not None and row is not None and (row[0] != epoch or row[1] != self._activations.get(run)):
            raise WriterFenced(path=self._file, run=run, epoch=epoch, current=int(row[0]), holder=self._holder(row[1], run))

    def _unlock_brief(self) -> None:
        """After each transaction (writer thread): release the locks ``_fence`` took for it."""
        brief, self._brief = self._brief, {}
        for token in brief.values():
            self._unlock(token)

