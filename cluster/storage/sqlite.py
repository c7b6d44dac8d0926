"""The SQLite store: one file, WAL mode, ``synchronous=FULL``, a group-commit writer.

Every write (appends, checkpoints, agent records, new runs) is an operation for the
:class:`~._writer.GroupCommitWriter`, whose thread owns the only write connection and
commits whatever is queued in one transaction (one fsync). Readers use one read-only
connection per thread. Opening an existing file checks it first, read-only
(:func:`~._schema.validate_file`); a bad file raises and is never written to.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ._schema import (
    SCHEMA_VERSION,
    open_connection,
    open_writer,
    translate,
    validate_file,
)
from ._claims import WriterClaim, claim, lock_briefly, unlock
from ._gate import WriteGate
from ._writer import GroupCommitWriter
from .base import (
    KEEP_CHECKPOINTS,
    AgentRecordRow,
    Checkpoint,
    Durability,
    JournalEntry,
    RunInfo,
    StoreStatistics,
    check_entries,
    check_tail,
    dump_json,
)
from .exceptions import (
    JournalGap,
    RunExists,
    RunNotFound,
    StoreClosed,
    StoreCorrupted,
    StoreReadOnly,
    VersionCompacted,
    WriterFenced,
)

__all__ = ["SCHEMA_VERSION", "SqliteStore"]

logger = logging.getLogger(__name__)
_LOG = {"component": "store"}
_IDS_PER_QUERY = 500  # request ids per "IN (...)" lookup (SQLite allows 32,766 parameters; keep statements small)


def _open_connection(path: str, *, writer: bool) -> sqlite3.Connection:
    """Open a connection; tests replace this hook to simulate read-only files or full disks."""
    return open_connection(path, writer=writer)


class SqliteStore:
    """A durable store in one SQLite file.

    ``durability`` ``"sync"`` and ``"batch"`` behave the same here: both go through the
    group-commit writer and an append's future resolves once its rows are fsynced; the
    orchestrator waits for each future (sync) or pipelines them (batch). With ``"exit"``,
    appends are kept in memory, their futures resolve at once, and they are written at
    ``flush()``, ``close()`` or interpreter exit, and before any checkpoint, compaction or
    journal read. Risk: a crash or kill loses every entry since the last flush, and append
    errors (gaps, duplicates, full disk) surface only from ``flush()``/``close()``.

    One writer per run: the orchestrator actor that opens a run for writing holds its
    :meth:`claim_writer` (an OS lock beside the file, dropped when the holder exits however it
    exits). A write to a run this store has not claimed takes that lock for its transaction
    only, and fails with ``RunLockedElsewhere`` while another process holds the claim.
    """

    def __init__(self, path: str | os.PathLike[str], *, durability: Durability = "sync") -> None:
        if durability not in ("sync", "batch", "exit"):
            raise ValueError(f"durability must be 'sync', 'batch' or 'exit', not {durability!r}")
        self.path: str | None = os.path.abspath(os.fspath(path))
        self._file: str = self.path
        self.durability: Durability = durability
        self._lock = threading.Lock()  # guards _closed, _pending and _readers
        self._closed = False  # set once by close(); reads and writes then raise StoreClosed
        self._pending: list[tuple[str, list[JournalEntry], list[tuple[Any, ...]]]] = []  # exit mode
        self._draining: list[concurrent.futures.Future[Any]] = []  # exit mode: drained, maybe not yet written
        self._readers: list[sqlite3.Connection] = []  # every thread's read connection
        self._local = threading.local()
        self._claims: dict[str, WriterClaim] = {}  # runs this store writes as their one writer
        self._brief: dict[str, int] = {}  # runs locked for the current transaction (writer thread only)
        self._epochs: dict[str, int] = {}  # runs this store writes as their activation of that epoch
        existing = os.path.exists(self._file) and os.path.getsize(self._file) > 0
        if existing:
            validate_file(self._file, _open_connection)
        else:
            try:
                os.makedirs(os.path.dirname(self._file), exist_ok=True)
            except OSError as exc:
                raise StoreReadOnly(path=self._file, problem=f"cannot create directory: {exc}") from exc
        self._gate = WriteGate(self._file)
        try:
            self._writer = GroupCommitWriter(
                self._file, lambda: open_writer(self._file, _open_connection), after_group=self._unlock_brief,
                gate=self._gate,
            )
        except BaseException:
            self._gate.close()
            raise
        atexit.register(self.close)
        logger.info(
            "opened store %s (%s, durability=%s)", self._file, "existing" if existing else "new", durability, extra=_LOG
        )

    # -- writes -----------------------------------------------------------------------

    def create_run(self, info: RunInfo, initial_state: dict[str, Any]) -> None:
        """Durably store the run and its checkpoint at version 0; ``RunExists`` if present."""
        state = dump_json(initial_state, "initial state")
        meta = dump_json(info.metadata, "run metadata")

        def op(conn: sqlite3.Connection) -> None:
            self._fence(info.name, conn)
            if conn.execute("SELECT 1 FROM runs WHERE name = ?", (info.name,)).fetchone():
                raise RunExists(path=self._file, run=info.name)
            conn.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
                (info.name, info.state_type, info.created_at, info.owner_token, meta),
            )
            conn.execute("INSERT INTO checkpoints VALUES (?, 0, ?, ?)", (info.name, state, time.time()))

        self._writer.submit(op).result()

    def append(self, run: str, entries: Sequence[JournalEntry]) -> concurrent.futures.Future[None]:
        """Enqueue entries; the future resolves once they are fsynced (see class docstring)."""
        entries = list(entries)
        rows = [
            (run, e.version, e.request_id, e.kind, dump_json(e.payload, f"payload of version {e.version}"), e.created_at)
            for e in entries
        ]
        if self.durability == "exit":
            with self._lock:
                if not self._closed:
                    self._pending.append((run, entries, rows))
                    done: concurrent.futures.Future[None] = concurrent.futures.Future()
                    done.set_result(None)
                    return done
        return self._writer.submit(lambda conn: self._write_entries(conn, run, entries, rows))

    def flush(self) -> None:
        """Block until everything enqueued is durable (exit mode: raise its first error)."""
        self._drain_pending()
        self._writer.submit(None).result()

    def put_checkpoint(self, run: str, version: int, state: dict[str, Any]) -> None:
        """Durably store a checkpoint (``version`` <= last journal version); keep the last two."""
        text = dump_json(state, f"checkpoint state of version {version}")
        self._drain_pending()

        def op(conn: sqlite3.Connection) -> None:
            self._fence(run, conn)
            last = self._last_version(conn, run)
            if version > last:
                raise JournalGap(
                    path=self._file,
                    run=run,
                    missing=last + 1,
                    detail=f"checkpoint at version {version} but the journal ends at {last}",
                )
            conn.execute("INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?)", (run, version, text, time.time()))

        self._writer.submit(op).result()

    def compact(self, run: str, *, keep_from: int | None = None) -> int:
        """Delete journal rows no longer needed; return how many.

        Without ``keep_from``: the rows covered by the latest checkpoint (request ids stay
        findable, the last two checkpoints stay). With ``keep_from``: the retention window -
        every state from the newest checkpoint at or before ``keep_from`` onwards stays
        rebuildable; older checkpoints, journal rows and request ids are deleted.
        """
        self._drain_pending()

        def op(conn: sqlite3.Connection) -> int:
            self._fence(run, conn)
            self._last_version(conn, run)
            if keep_from is None:
                (base,) = conn.execute("SELECT MAX(version) FROM checkpoints WHERE run = ?", (run,)).fetchone()
                conn.execute(
                    "DELETE FROM checkpoints WHERE run = ? AND version NOT IN "
                    "(SELECT version FROM checkpoints WHERE run = ? ORDER BY version DESC LIMIT ?)",
                    (run, run, KEEP_CHECKPOINTS),
                )
                return conn.execute("DELETE FROM journal WHERE run = ? AND version <= ?", (run, base)).rowcount
            row = conn.execute(
                "SELECT MAX(version) FROM checkpoints WHERE run = ? AND version <= ?", (run, keep_from)
            ).fetchone()
            if row[0] is None:
                return 0
            base = int(row[0])
            conn.execute("DELETE FROM checkpoints WHERE run = ? AND version < ?", (run, base))
            conn.execute("DELETE FROM requests WHERE run = ? AND version < ?", (run, base))
            return conn.execute("DELETE FROM journal WHERE run = ? AND version <= ?", (run, base)).rowcount

        removed: int = self._writer.submit(op).result()
        return removed

    def delete_run(self, run: str) -> None:
        """Durably delete everything stored for ``run``; ``RunNotFound`` if it is not stored."""
        self._drain_pending()

        def op(conn: sqlite3.Connection) -> None:
            self._fence(run, conn)
            self._require_run(conn, run)
            # The activation row stays: a run created again under this name must still supersede
            # any writer of the deleted one.
            for table in ("journal", "requests", "checkpoints", "agents"):
                conn.execute(f"DELETE FROM {table} WHERE run = ?", (run,))
            conn.execute("DELETE FROM runs WHERE name = ?", (run,))

        self._writer.submit(op).result()

    def update_run_metadata(self, run: str, changes: dict[str, Any]) -> RunInfo:
        """Durably merge ``changes`` into the run's metadata; return the updated info."""
        dump_json(changes, "run metadata")

        def op(conn: sqlite3.Connection) -> RunInfo:
            self._fence(run, conn)
            self._require_run(conn, run)
            row = conn.execute("SELECT * FROM runs WHERE name = ?", (run,)).fetchone()
            info = self._run_info(row)
            merged = {**info.metadata, **changes}
            conn.execute("UPDATE runs SET metadata = ? WHERE name = ?", (dump_json(merged, "run metadata"), run))
            return info.model_copy(update={"metadata": merged})

        updated: RunInfo = self._writer.submit(op).result()
        return updated

    def put_agent(self, run: str, agent_id: str, record: dict[str, Any]) -> AgentRecordRow:
        """Durably upsert an agent record with the run's next ``seq``."""
        text = dump_json(record, f"record of agent {agent_id!r}")

        def op(conn: sqlite3.Connection) -> AgentRecordRow:
            self._fence(run, conn)
            self._last_version(conn, run)
            (seq,) = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM agents WHERE run = ?", (run,)).fetchone()
            now = time.time()
            conn.execute("INSERT OR REPLACE INTO agents VALUES (?, ?, ?, ?, ?)", (run, agent_id, text, now, seq))
            return AgentRecordRow(agent_id=agent_id, record=json.loads(text), updated_at=now, seq=seq)

        row: AgentRecordRow = self._writer.submit(op).result()
        return row

    # -- reads ------------------------------------------------------------------------

    def get_run(self, name: str) -> RunInfo | None:
        """The run's info, or None."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM runs WHERE name = ?", (name,)).fetchone()
        return self._run_info(row) if row else None

    def list_runs(self) -> list[RunInfo]:
        """Every run, oldest first."""
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM runs ORDER BY created_at, name").fetchall()
        return [self._run_info(row) for row in rows]

    def find_request(self, run: str, request_id: str) -> int | None:
        """The version committed with ``request_id`` (also after compaction), or None.

        Exit mode: entries kept in memory are searched first, and nothing is flushed (an
        orchestrator checks every write's request id; flushing here would defeat ``exit``).
        """
        with self._lock:
            for pending_run, entries, _rows in self._pending:
                if pending_run == run:
                    for entry in entries:
                        if entry.request_id == request_id:
                            return entry.version
        with self._read() as conn:
            self._require_run(conn, run)
            row = conn.execute("SELECT version FROM requests WHERE run = ? AND request_id = ?", (run, request_id))
            found = row.fetchone()
        return found[0] if found else None

    def find_requests(self, run: str, request_ids: Sequence[str]) -> dict[str, int]:
        """``find_request`` of many ids in one read (a queued group of writes checks its ids at once)."""
        wanted = list(dict.fromkeys(request_ids))
        found: dict[str, int] = {}
        with self._lock:
            for pending_run, entries, _rows in self._pending:
                if pending_run == run:
                    found.update((e.request_id, e.version) for e in entries if e.request_id in wanted)
        missing = [r for r in wanted if r not in found]
        if not missing:
            return found
        with self._read() as conn:
            self._require_run(conn, run)
            for start in range(0, len(missing), _IDS_PER_QUERY):
                chunk = missing[start : start + _IDS_PER_QUERY]
                rows = conn.execute(
                    f"SELECT request_id, version FROM requests WHERE run = ? AND request_id IN ({','.join('?' * len(chunk))})",
                    (run, *chunk),
                )
                found.update(rows.fetchall())
        return found

    def last_versions(self, runs: Sequence[str]) -> dict[str, int]:
        """The last committed version of each of ``runs`` that is stored (absent names are left
        out), in one read of a few index seeks per run: what ``load`` would end at, without
        reading any state or journal payload (``soloist status`` shows a page of thousands).

        Exit mode: entries kept in memory count too, and nothing is flushed."""
        wanted = list(dict.fromkeys(runs))
        found: dict[str, int] = {}
        with self._read(snapshot=True) as conn:
            for start in range(0, len(wanted), _IDS_PER_QUERY):
                chunk = wanted[start : start + _IDS_PER_QUERY]
                rows = conn.execute(
                    "SELECT name, MAX(COALESCE((SELECT MAX(version) FROM journal WHERE run = runs.name), 0), "
                    "COALESCE((SELECT MAX(version) FROM checkpoints WHERE run = runs.name), 0)) "
                    f"FROM runs WHERE name IN ({','.join('?' * len(chunk))})",
                    chunk,
                )
                found.update((name, int(version)) for name, version in rows.fetchall())
        with self._lock:
            for pending_run, entries, _rows in self._pending:
                if pending_run in found and entries:
                    found[pending_run] = max(found[pending_run], entries[-1].version)
        return found

    def load(self, run: str) -> tuple[Checkpoint, list[JournalEntry]]:
        """The latest checkpoint and every later journal entry, in order; ``JournalGap`` on a hole."""
        self._drain_pending()
        with self._read(snapshot=True) as conn:
            self._require_run(conn, run)
            latest = conn.execute(
                "SELECT version, state, created_at FROM checkpoints WHERE run = ? ORDER BY version DESC LIMIT 1",
                (run,),
            ).fetchone()
            if latest is None:
                raise StoreCorrupted(path=self._file, problem=f"run {run!r} has no checkpoint")
            base, state, created = latest
            rows = conn.execute(
                "SELECT version, request_id, kind, payload, created_at FROM journal "
                "WHERE run = ? AND version > ? ORDER BY version",
                (run, base),
            ).fetchall()
        checkpoint = Checkpoint(
            version=base, state=self._parse(state, f"checkpoint {base} of run {run!r}"), created_at=created
        )
        try:
            entries = [
                JournalEntry(
                    version=v, request_id=r, kind=k, payload=self._parse(p, f"journal version {v} of run {run!r}"), created_at=c
                )
                for v, r, k, p, c in rows
            ]
        except ValueError as exc:  # pydantic rejected a row (e.g. unknown kind)
            raise StoreCorrupted(path=self._file, problem=f"bad journal row of run {run!r}: {exc}") from exc
        check_tail(self._file, run, base, entries)
        return checkpoint, entries

    def oldest_version(self, run: str) -> int:
        """The earliest version whose state can still be rebuilt (its oldest checkpoint)."""
        self._drain_pending()
        with self._read() as conn:
            self._require_run(conn, run)
            (oldest,) = conn.execute("SELECT MIN(version) FROM checkpoints WHERE run = ?", (run,)).fetchone()
        if oldest is None:
            raise StoreCorrupted(path=self._file, problem=f"run {run!r} has no checkpoint")
        return int(oldest)

    def entries(self, run: str, since: int, until: int) -> list[JournalEntry]:
        """The journal entries with ``since < version <= until``, in order (what is still kept)."""
        self._drain_pending()
        with self._read() as conn:
            self._require_run(conn, run)
            rows = conn.execute(
                "SELECT version, request_id, kind, payload, created_at FROM journal "
                "WHERE run = ? AND version > ? AND version <= ? ORDER BY version",
                (run, since, until),
            ).fetchall()
        return [self._entry(run, row) for row in rows]

    def load_at(self, run: str, version: int) -> tuple[Checkpoint, list[JournalEntry]]:
        """The newest checkpoint at or before ``version`` and the entries up to ``version``."""
        self._drain_pending()
        with self._read(snapshot=True) as conn:
            self._require_run(conn, run)
            row = conn.execute(
                "SELECT version, state, created_at FROM checkpoints WHERE run = ? AND version <= ? "
                "ORDER BY version DESC LIMIT 1",
                (run, version),
            ).fetchone()
            if row is None:
                (oldest,) = conn.execute("SELECT MIN(version) FROM checkpoints WHERE run = ?", (run,)).fetchone()
                raise VersionCompacted(path=self._file, run=run, requested=version, oldest=oldest)
            base, state, created = row
            rows = conn.execute(
                "SELECT version, request_id, kind, payload, created_at FROM journal "
                "WHERE run = ? AND version > ? AND version <= ? ORDER BY version",
                (run, base, version),
            ).fetchall()
        checkpoint = Checkpoint(
            version=base, state=self._parse(state, f"checkpoint {base} of run {run!r}"), created_at=created
        )
        entries = [self._entry(run, r) for r in rows]
        check_tail(self._file, run, base, entries)
        if base + len(entries) != version:
            raise JournalGap(path=self._file, run=run, missing=base + len(entries) + 1, detail=f"rebuilding version {version}")
        return checkpoint, entries

    def _entry(self, run: str, row: tuple[Any, ...]) -> JournalEntry:
        v, r, k, p, c = row
        try:
            return JournalEntry(version=v, request_id=r, kind=k, payload=self._parse(p, f"journal version {v} of run {run!r}"), created_at=c)
        except ValueError as exc:  # pydantic rejected a row (e.g. unknown kind)
            raise StoreCorrupted(path=self._file, problem=f"bad journal row of run {run!r}: {exc}") from exc

    def get_agent(self, run: str, agent_id: str) -> AgentRecordRow | None:
        """One agent record, or None."""
        with self._read() as conn:
            self._require_run(conn, run)
            row = conn.execute(
                "SELECT agent_id, record, updated_at, seq FROM agents WHERE run = ? AND agent_id = ?", (run, agent_id)
            ).fetchone()
        return self._agent_row(run, row) if row else None

    def list_agents(self, run: str) -> list[AgentRecordRow]:
        """The run's agent records in ``seq`` order (least recently written first)."""
        with self._read() as conn:
            self._require_run(conn, run)
            rows = conn.execute(
                "SELECT agent_id, record, updated_at, seq FROM agents WHERE run = ? ORDER BY seq", (run,)
            ).fetchall()
        return [self._agent_row(run, row) for row in rows]

    def statistics(self) -> StoreStatistics:
        """Counters; ``mean_batch_size`` = operations per fsynced transaction."""
        with self._read() as conn:
            (journal_rows,) = conn.execute("SELECT COUNT(*) FROM journal").fetchone()
            (checkpoints,) = conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()
        commits, batches = self._writer.commits, self._writer.fsync_batches
        return StoreStatistics(
            path=self._file,
            durability=self.durability,
            journal_rows=journal_rows,
            checkpoints=checkpoints,
            commits=commits,
            fsync_batches=batches,
            mean_batch_size=commits / batches if batches else 0.0,
        )

    def close(self) -> None:
        """Flush, stop the writer and close every connection; idempotent."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            with self._lock:
                self._closed = True
                readers, self._readers = self._readers, []
            self._writer.close()
            self._gate.close()
            for conn in readers:
                conn.close()
            for claimed in list(self._claims.values()):
                claimed.release()
            self._claims.clear()
            atexit.unregister(self.close)
            logger.info("closed store %s", self._file, extra=_LOG)

    def _write_entries(
        self, conn: sqlite3.Connection, run: str, entries: list[JournalEntry], rows: list[tuple[Any, ...]]
    ) -> None:
        """Check that ``entries`` continue the run's journal, then insert them."""
        self._fence(run, conn)
        last = self._last_version(conn, run)

        def committed(request_id: str) -> int | None:
            row = conn.execute("SELECT version FROM requests WHERE run = ? AND request_id = ?", (run, request_id))
            found = row.fetchone()
            return found[0] if found else None

        check_entries(self._file, run, last, entries, committed)
        conn.executemany("INSERT INTO journal VALUES (?, ?, ?, ?, ?, ?)", rows)
        conn.executemany("INSERT INTO requests VALUES (?, ?, ?)", [(run, e.request_id, e.version) for e in entries])

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
        self._claims[run] = claim(self._file, run, holder, timeout=timeout)

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
        it begins (a new run's activation and its creation then share one fsync)."""
        if self._closed:
            raise StoreClosed(path=self._file)
        record = dump_json(holder, "activation holder")

        def op(conn: sqlite3.Connection) -> int:
            row = conn.execute("SELECT epoch FROM activations WHERE run = ?", (run,)).fetchone()
            epoch = int((row[0] if row else 0) + 1)
            conn.execute("INSERT OR REPLACE INTO activations VALUES (?, ?, ?, ?)", (run, epoch, record, time.time()))
            self._epochs[run] = epoch  # on the writer thread: the next queued write is fenced with it
            return epoch

        return self._writer.submit(op)

    def deactivate(self, run: str) -> None:
        """Stop writing the run as its activation (unloaded or closed); the epoch stays, so the
        next activation, here or anywhere, supersedes this one. Idempotent."""
        self._epochs.pop(run, None)

    def activation(self, run: str) -> tuple[int, dict[str, Any]] | None:
        """The run's current ``(epoch, holder)``, or None if it was never activated."""
        with self._read() as conn:
            row = conn.execute("SELECT epoch, holder FROM activations WHERE run = ?", (run,)).fetchone()
        return (int(row[0]), self._parse(row[1], f"activation of run {run!r}")) if row else None

    def check_writer(self, run: str) -> None:
        """Raise ``RunLockedElsewhere`` naming the holder when another process (or another
        store object) holds the run's claim; return when nobody does (nothing is kept)."""
        if run in self._claims:
            return
        fd = lock_briefly(self._file, run)
        if fd is not None:
            unlock(fd)

    def release_writer(self, run: str) -> None:
        """Stop being the run's writer (idempotent); other processes may then claim it."""
        claimed = self._claims.pop(run, None)
        if claimed is not None:
            claimed.release()

    def _fence(self, run: str, conn: sqlite3.Connection) -> None:
        """Inside a write (writer thread): refuse it when this store activated the run and a
        later activation superseded it (``WriterFenced``); else unless this store holds the
        run's claim or nobody does (then hold the lock until this transaction ends)."""
        epoch = self._epochs.get(run)
        if epoch is not None:
            row = conn.execute("SELECT epoch, holder FROM activations WHERE run = ?", (run,)).fetchone()
            if row is not None and row[0] != epoch:
                raise WriterFenced(path=self._file, run=run, epoch=epoch, current=int(row[0]),
                                   holder=self._parse(row[1], f"activation of run {run!r}"))
            if run not in self._claims:
                return  # fenced by the epoch alone: the holder of the OS lock, if any, is superseded
        if run in self._claims or run in self._brief:
            return
        fd = lock_briefly(self._file, run)
        if fd is not None:
            self._brief[run] = fd

    def _unlock_brief(self) -> None:
        """After each transaction (writer thread): release the locks ``_fence`` took for it."""
        brief, self._brief = self._brief, {}
        for fd in brief.values():
            unlock(fd)

    def _last_version(self, conn: sqlite3.Connection, run: str) -> int:
        """The run's last journal version (0 before any); ``RunNotFound`` if not stored."""
        self._require_run(conn, run)
        (last,) = conn.execute("SELECT COALESCE(MAX(version), 0) FROM requests WHERE run = ?", (run,)).fetchone()
        return int(last)

    def _drain_pending(self) -> None:
        """Exit mode: write the entries kept in memory; raise the first failure."""
        with self._lock:
            pending, self._pending = self._pending, []
            # Queued under the lock, so whatever another thread writes or reads after its own
            # drain (a checkpoint, a load) comes after these entries: the writer keeps order.
            futures = [self._writer.submit(lambda c, p=p: self._write_entries(c, *p)) for p in pending]
            self._draining = [f for f in self._draining if not f.done()] + futures
            in_flight = list(self._draining)  # also the entries other threads are draining now
        concurrent.futures.wait(in_flight)
        errors = [exc for exc in (f.exception() for f in futures) if exc is not None]
        for extra in errors[1:]:
            logger.error("exit-mode append failed: %s", extra, extra=_LOG)
        if errors:
            raise errors[0]

    # -- reading helpers --------------------------------------------------------------

    @contextmanager
    def _read(self, *, snapshot: bool = False) -> Iterator[sqlite3.Connection]:
        """This thread's read connection (one consistent snapshot with ``snapshot``)."""
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
            yield conn
        except sqlite3.Error as exc:
            raise translate(exc, self._file, writing=False) from exc
        finally:
            if snapshot and conn.in_transaction:
                conn.execute("COMMIT")

    def _require_run(self, conn: sqlite3.Connection, run: str) -> None:
        """Raise ``RunNotFound`` unless the run is stored."""
        if not conn.execute("SELECT 1 FROM runs WHERE name = ?", (run,)).fetchone():
            raise RunNotFound(path=self._file, run=run)

    def _parse(self, text: str, where: str) -> Any:
        """Decode a stored JSON column; ``StoreCorrupted`` naming the row if it does not parse."""
        try:
            return json.loads(text)
        except (TypeError, ValueError) as exc:
            raise StoreCorrupted(path=self._file, problem=f"{where} is not valid JSON ({exc})") from exc

    def _run_info(self, row: tuple[Any, ...]) -> RunInfo:
        """A ``runs`` row as a ``RunInfo``."""
        name, state_type, created_at, token, metadata = row
        meta = self._parse(metadata, f"metadata of run {name!r}")
        return RunInfo(name=name, state_type=state_type, created_at=created_at, owner_token=token, metadata=meta)

    def _agent_row(self, run: str, row: tuple[Any, ...]) -> AgentRecordRow:
        """An ``agents`` row as an ``AgentRecordRow``."""
        agent_id, record, updated_at, seq = row
        parsed = self._parse(record, f"record of agent {agent_id!r} in run {run!r}")
        return AgentRecordRow(agent_id=agent_id, record=parsed, updated_at=updated_at, seq=seq)
