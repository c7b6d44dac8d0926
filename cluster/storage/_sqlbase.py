"""What the SQL stores share: the store's behaviour written once over a DB-API connection.

:class:`SqlStore` holds every operation of the store protocol (its SQL, its checks, its
fencing, exit mode) in the SQL both SQLite and PostgreSQL speak, with ``?`` placeholders.
A subclass supplies the database: the write session of the group-commit writer, reads
(:meth:`SqlStore._query`), the writer claim, and the brief per-transaction lock of a run
it has not claimed. Every write is an operation of the :class:`~._writer.GroupCommitWriter`;
every operation checks, inside its transaction, that this store's activation of the run
is still the newest (``WriterFenced``).
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ._blobs import blob_digests, pack_metadata, unpack_metadata
from ._single_writer import Claim, SingleWriter
from ._writer import GroupCommitWriter, Mergeable
from .base import (
    check_durability,
    check_request_id,
    KEEP_CHECKPOINTS,
    AgentRecordRow,
    Checkpoint,
    Durability,
    JournalEntry,
    RunInfo,
    Store,
    StoreStatistics,
    check_entries,
    check_tail,
    dump_json,
    payload_text,
)
from .exceptions import (
    JournalGap,
    RunExists,
    RunNotFound,
    StoreClosed,
    StoreCorrupted,
    VersionCompacted,
    WriterFenced,
)

__all__ = ["SqlStore"]

logger = logging.getLogger(__name__)
_LOG = {"component": "store"}
_IDS_PER_QUERY = 500  # names or request ids per "IN (...)" lookup: keep statements small
_ENTRY_COLUMNS = "version, request_id, kind, payload, created_at"

T = TypeVar("T")
Conn = Any  # a DB-API connection whose ``execute(sql, params)`` returns a cursor ("?" placeholders)


class SqlStore(SingleWriter, Store):
    """The store protocol over SQL; see the subclasses for where the rows live. Processes
    share its database: it keeps each run to one writer (``SingleWriter``).

    ``durability`` ``"sync"`` and ``"batch"`` behave the same here: both go through the
    group-commit writer and an append's future resolves once its rows are committed; the
    orchestrator waits for each future (sync) or pipelines them (batch). With ``"exit"``,
    appends are kept in memory, their futures resolve at once, and they are written at
    ``flush()``, ``close()`` or interpreter exit, and before any checkpoint, compaction or
    journal read. Risk: a crash or kill loses every entry since the last flush, and append
    errors (gaps, duplicates, a failed write) surface only from ``flush()``/``close()``.
    """

    path: str | None
    _GREATEST = "MAX"  # the scalar maximum of two values

    def _init_common(self, location: str, durability: Durability) -> None:
        """Set the fields every SQL store has (before its writer starts)."""
        check_durability(durability)
        self.path = location
        self._file: str = location  # what errors and logs name (never a password)
        self.durability: Durability = durability
        self._lock = threading.Lock()  # guards _closed and _pending
        self._closed = False  # set once by close(); reads and writes then raise StoreClosed
        self._pending: list[tuple[str, list[JournalEntry], list[tuple[Any, ...]]]] = []  # exit mode
        self._draining: list[concurrent.futures.Future[Any]] = []  # exit mode: drained, maybe not yet written
        self._claims: dict[str, Claim] = {}  # runs this store writes as their one writer
        self._brief: dict[str, Any] = {}  # runs locked for the current transaction (writer thread only)
        self._epochs: dict[str, int] = {}  # runs this store writes as their activation of that epoch
        self._activations: dict[str, str] = {}  # ... and the holder record that activation wrote
        # digest -> text of blobs read or written here (content-addressed, so never stale: kept
        # for reads; a write still asks the database whether the row is there)
        self._blobs: dict[str, str] = {}
        self._writer: GroupCommitWriter

    # -- what a database supplies -------------------------------------------------------

    def _query(self, fn: Callable[[Conn], T], *, snapshot: bool = False) -> T:
        """Run the read ``fn(conn)`` (in one consistent snapshot with ``snapshot``)."""
        raise NotImplementedError

    def _close_resources(self) -> None:
        """Close the connections (the writer is already stopped)."""

    def _run_deleted(self, conn: Conn, run: str) -> None:
        """Inside the deletion of ``run`` (writer thread): drop what the database keeps per
        run name for its one writer (a lock file, a claim record)."""

    # -- writes -----------------------------------------------------------------------

    def create_run(self, info: RunInfo, initial_state: dict[str, Any]) -> None:
        """Durably store the run and its checkpoint at version 0; ``RunExists`` if present."""
        state = dump_json(initial_state, "initial state")
        packed, blobs = self._packed(info.metadata)
        meta = dump_json(packed, "run metadata")

        def op(conn: Conn) -> None:
            self._fence(info.name, conn)
            found = conn.execute("SELECT owner_token, created_at FROM runs WHERE name = ?", (info.name,)).fetchone()
            if found:
                if self._writer.retrying and tuple(found) == (info.owner_token, info.created_at):
                    return  # our own commit, whose acknowledgement the lost connection took
                raise RunExists(path=self._file, run=info.name)
            conn.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
                (info.name, info.state_type, info.created_at, info.owner_token, meta),
            )
            self._insert_blobs(conn, blobs)  # after the run's row: see collect_blobs
            conn.execute("INSERT INTO checkpoints VALUES (?, 0, ?, ?)", (info.name, state, time.time()))

        self._writer.submit(op).result()
        self._blobs.update(blobs)  # committed

    def append(self, run: str, entries: Sequence[JournalEntry]) -> concurrent.futures.Future[None]:
        """Enqueue entries; the future resolves once they are committed (see class docstring)."""
        entries = list(entries)
        rows = [
            (run, e.version, check_request_id(e.request_id), e.kind, payload_text(e), e.created_at)
            for e in entries
        ]
        if self.durability == "exit":
            with self._lock:
                if not self._closed:
                    self._pending.append((run, entries, rows))
                    done: concurrent.futures.Future[None] = concurrent.futures.Future()
                    done.set_result(None)
                    return done
        return self._writer.submit(_Append(self, run, entries, rows))

    def flush(self) -> None:
        """Block until everything enqueued is durable (exit mode: raise its first error)."""
        self._drain_pending()
        self._writer.submit(None).result()

    def put_checkpoint(self, run: str, version: int, state: dict[str, Any]) -> None:
        """Durably store a checkpoint (``version`` <= last journal version)."""
        text = dump_json(state, f"checkpoint state of version {version}")
        self._drain_pending()

        def op(conn: Conn) -> None:
            self._fence(run, conn)
            last = self._last_version(conn, run)
            if version > last:
                raise JournalGap(
                    path=self._file,
                    run=run,
                    missing=last + 1,
                    detail=f"checkpoint at version {version} but the journal ends at {last}",
                )
            conn.execute(
                "INSERT INTO checkpoints VALUES (?, ?, ?, ?) ON CONFLICT (run, version) "
                "DO UPDATE SET state = excluded.state, created_at = excluded.created_at",
                (run, version, text, time.time()),
            )

        self._writer.submit(op).result()

    def compact(self, run: str, *, keep_from: int | None = None) -> int:
        """Delete journal rows no longer needed; return how many.

        Without ``keep_from``: the rows covered by the latest checkpoint (request ids stay
        findable, the last two checkpoints stay). With ``keep_from``: the retention window -
        every state from the newest checkpoint at or before ``keep_from`` onwards stays
        rebuildable; older checkpoints, journal rows and request ids are deleted.
        """
        self._drain_pending()

        def op(conn: Conn) -> int:
            self._fence(run, conn)
            self._last_version(conn, run)
            if keep_from is None:
                (base,) = conn.execute("SELECT MAX(version) FROM checkpoints WHERE run = ?", (run,)).fetchone()
                conn.execute(
                    "DELETE FROM checkpoints WHERE run = ? AND version NOT IN "
                    "(SELECT version FROM checkpoints WHERE run = ? ORDER BY version DESC LIMIT ?)",
                    (run, run, KEEP_CHECKPOINTS),
                )
                return int(conn.execute("DELETE FROM journal WHERE run = ? AND version <= ?", (run, base)).rowcount)
            row = conn.execute(
                "SELECT MAX(version) FROM checkpoints WHERE run = ? AND version <= ?", (run, keep_from)
            ).fetchone()
            if row[0] is None:
                return 0
            base = int(row[0])
            conn.execute("DELETE FROM checkpoints WHERE run = ? AND version < ?", (run, base))
            conn.execute("DELETE FROM requests WHERE run = ? AND version < ?", (run, base))
            return int(conn.execute("DELETE FROM journal WHERE run = ? AND version <= ?", (run, base)).rowcount)

        removed: int = self._writer.submit(op).result()
        if removed:
            self._compacted()
        return removed

    def _compacted(self) -> None:
        """After a compaction deleted rows: a database that keeps deleted rows' space until
        told (PostgreSQL) makes it reusable here. SQLite reuses freed pages by itself."""

    def delete_run(self, run: str) -> None:
        """Durably delete everything stored for ``run``; ``RunNotFound`` if it is not stored."""
        self._drain_pending()

        def op(conn: Conn) -> None:
            self._fence(run, conn)
            if self._writer.retrying and not conn.execute("SELECT 1 FROM runs WHERE name = ?", (run,)).fetchone():
                return  # deleted by this very write before its connection was lost
            self._require_run(conn, run)
            # The activation goes too (kept, one row per name ever deleted stayed forever). The
            # fence above passed, so no other activation can write the run any more: a newer
            # one would have fenced this write, an older one finds no run to write to.
            for table in ("journal", "requests", "checkpoints", "agents", "activations"):
                conn.execute(f"DELETE FROM {table} WHERE run = ?", (run,))
            conn.execute("DELETE FROM runs WHERE name = ?", (run,))
            self._run_deleted(conn, run)

        self._writer.submit(op).result()

    def collect_blobs(self) -> int:
        """Delete the long metadata values (blobs) that no stored run refers to; return how many.

        Runs' references are read and the unreferenced blobs deleted in one write transaction,
        while no other transaction can insert or update a run (SQLite's write transactions
        are exclusive; PostgreSQL's ``runs`` is locked in ``SHARE`` mode). A write that
        refers to a blob inserts the run's row first and then stores the blob if its row is
        missing, so a collection either sees that run, or ended before the write looked.
        """

        def op(conn: Conn) -> int:
            self._lock_runs(conn)
            referenced: set[str] = set()
            for name, metadata in conn.execute("SELECT name, metadata FROM runs").fetchall():
                referenced.update(blob_digests(self._parse(metadata, f"metadata of run {name!r}")))
            unused = [digest for (digest,) in conn.execute("SELECT digest FROM blobs").fetchall() if digest not in referenced]
            for digest in unused:
                conn.execute("DELETE FROM blobs WHERE digest = ?", (digest,))
            return len(unused)

        removed: int = self._writer.submit(op).result()
        if removed:
            logger.info("store %s: deleted %d metadata values no run refers to", self._file, removed, extra=_LOG)
        return removed

    def update_run_metadata(self, run: str, changes: dict[str, Any]) -> RunInfo:
        """Durably merge ``changes`` into the run's metadata; return the updated info."""
        dump_json(changes, "run metadata")

        packed, blobs = self._packed(changes)

        def op(conn: Conn) -> RunInfo:
            self._fence(run, conn)
            self._require_run(conn, run)
            row = conn.execute("SELECT * FROM runs WHERE name = ?", (run,)).fetchone()
            stored = {**self._parse(row[4], f"metadata of run {run!r}"), **packed}
            conn.execute("UPDATE runs SET metadata = ? WHERE name = ?", (dump_json(stored, "run metadata"), run))
            self._insert_blobs(conn, blobs)  # after the run's row: see collect_blobs
            return self._run_info(row, conn, stored=stored, uncommitted=blobs)

        updated: RunInfo = self._writer.submit(op).result()
        self._blobs.update(blobs)  # committed
        return updated

    def put_agent(self, run: str, agent_id: str, record: dict[str, Any]) -> AgentRecordRow:
        """Durably upsert an agent record with the run's next ``seq``."""
        text = dump_json(record, f"record of agent {agent_id!r}")

        def op(conn: Conn) -> AgentRecordRow:
            self._fence(run, conn)
            self._last_version(conn, run)
            (seq,) = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM agents WHERE run = ?", (run,)).fetchone()
            now = time.time()
            conn.execute(
                "INSERT INTO agents VALUES (?, ?, ?, ?, ?) ON CONFLICT (run, agent_id) "
                "DO UPDATE SET record = excluded.record, updated_at = excluded.updated_at, seq = excluded.seq",
                (run, agent_id, text, now, seq),
            )
            return AgentRecordRow(agent_id=agent_id, record=json.loads(text), updated_at=now, seq=seq)

        row: AgentRecordRow = self._writer.submit(op).result()
        return row

    # -- reads ------------------------------------------------------------------------

    def get_run(self, name: str) -> RunInfo | None:
        """The run's info, or None."""
        def read(conn: Conn) -> RunInfo | None:
            row = conn.execute("SELECT * FROM runs WHERE name = ?", (name,)).fetchone()
            return self._run_info(row, conn) if row else None

        # One snapshot: the run's row and the blobs it refers to, which a collection may
        # delete once another process deleted the run between the two reads.
        return self._query(read, snapshot=True)

    def list_runs(self) -> list[RunInfo]:
        """Every run, oldest first (one snapshot, as ``get_run``)."""
        return self._query(lambda conn: [self._run_info(row, conn) for row in conn.execute(
            "SELECT * FROM runs ORDER BY created_at, name").fetchall()], snapshot=True)

    def find_request(self, run: str, request_id: str) -> int | None:
        """The version committed with ``request_id`` (also after compaction), or None.

        Exit mode: entries kept in memory are searched first, and nothing is flushed (an
        orchestrator checks every write's request id; flushing here would defeat ``exit``).
        """
        return self.find_requests(run, [request_id]).get(request_id)

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

        def read(conn: Conn) -> list[tuple[str, int]]:
            self._require_run(conn, run)
            return self._lookup_requests(conn, run, missing)

        found.update((request_id, int(version)) for request_id, version in self._query(read))
        return found

    def all_requests(self, run: str, *, at_most: int) -> dict[str, int] | None:
        """Every request id stored for the run when there are at most ``at_most`` (one read;
        the oldest and newest version first, by the index: a run holding more is not read).

        Exit mode: entries kept in memory count too, and nothing is flushed."""
        with self._lock:
            pending = [(e.request_id, e.version) for pending_run, entries, _rows in self._pending if pending_run == run
                       for e in entries]

        def read(conn: Conn) -> list[tuple[str, int]] | None:
            self._require_run(conn, run)
            lowest, highest = conn.execute("SELECT MIN(version), MAX(version) FROM requests WHERE run = ?", (run,)).fetchone()
            if lowest is not None and int(highest) - int(lowest) + 1 + len(pending) > at_most:
                return None  # one id per version, from the oldest kept to the last
            rows: list[tuple[str, int]] = conn.execute(
                "SELECT request_id, version FROM requests WHERE run = ?", (run,)).fetchall()
            return rows

        rows = self._query(read, snapshot=True)
        if rows is None:
            return None
        found = {request_id: int(version) for request_id, version in rows}
        found.update(pending)
        return found

    def last_versions(self, runs: Sequence[str]) -> dict[str, int]:
        """The last committed version of each of ``runs`` that is stored (absent names are left
        out), in one read of a few index seeks per run: what ``load`` would end at, without
        reading any state or journal payload (``soloist status`` shows a page of thousands).

        Exit mode: entries kept in memory count too, and nothing is flushed."""
        wanted = list(dict.fromkeys(runs))

        def read(conn: Conn) -> list[tuple[str, int]]:
            rows: list[tuple[str, int]] = []
            for start in range(0, len(wanted), _IDS_PER_QUERY):
                chunk = wanted[start : start + _IDS_PER_QUERY]
                rows += conn.execute(
                    f"SELECT name, {self._GREATEST}(COALESCE((SELECT MAX(version) FROM journal WHERE run = runs.name), 0), "
                    "COALESCE((SELECT MAX(version) FROM checkpoints WHERE run = runs.name), 0)) "
                    f"FROM runs WHERE name IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
            return rows

        found = {name: int(version) for name, version in self._query(read, snapshot=True)}
        with self._lock:
            for pending_run, entries, _rows in self._pending:
                if pending_run in found and entries:
                    found[pending_run] = max(found[pending_run], entries[-1].version)
        return found

    def load(self, run: str) -> tuple[Checkpoint, list[JournalEntry]]:
        """The latest checkpoint and every later journal entry, in order; ``JournalGap`` on a hole."""
        self._drain_pending()

        def read(conn: Conn) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
            self._require_run(conn, run)
            latest = conn.execute(
                "SELECT version, state, created_at FROM checkpoints WHERE run = ? ORDER BY version DESC LIMIT 1",
                (run,),
            ).fetchone()
            if latest is None:
                raise StoreCorrupted(path=self._file, problem=f"run {run!r} has no checkpoint")
            rows = conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM journal WHERE run = ? AND version > ? ORDER BY version",
                (run, latest[0]),
            ).fetchall()
            return latest, rows

        return self._rebuilt(run, *self._query(read, snapshot=True))

    def oldest_version(self, run: str) -> int:
        """The earliest version whose state can still be rebuilt (its oldest checkpoint)."""
        self._drain_pending()

        def read(conn: Conn) -> Any:
            self._require_run(conn, run)
            return conn.execute("SELECT MIN(version) FROM checkpoints WHERE run = ?", (run,)).fetchone()[0]

        oldest = self._query(read)
        if oldest is None:
            raise StoreCorrupted(path=self._file, problem=f"run {run!r} has no checkpoint")
        return int(oldest)

    def entries(self, run: str, since: int, until: int) -> list[JournalEntry]:
        """The journal entries with ``since < version <= until``, in order (what is still kept)."""
        self._drain_pending()

        def read(conn: Conn) -> list[tuple[Any, ...]]:
            self._require_run(conn, run)
            return list(conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM journal WHERE run = ? AND version > ? AND version <= ? ORDER BY version",
                (run, since, until),
            ).fetchall())

        return [self._entry(run, row) for row in self._query(read)]

    def load_at(self, run: str, version: int) -> tuple[Checkpoint, list[JournalEntry]]:
        """The newest checkpoint at or before ``version`` and the entries up to ``version``."""
        self._drain_pending()

        def read(conn: Conn) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
            self._require_run(conn, run)
            row = conn.execute(
                "SELECT version, state, created_at FROM checkpoints WHERE run = ? AND version <= ? "
                "ORDER BY version DESC LIMIT 1",
                (run, version),
            ).fetchone()
            if row is None:
                (oldest,) = conn.execute("SELECT MIN(version) FROM checkpoints WHERE run = ?", (run,)).fetchone()
                raise VersionCompacted(path=self._file, run=run, requested=version, oldest=oldest)
            rows = conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM journal WHERE run = ? AND version > ? AND version <= ? ORDER BY version",
                (run, row[0], version),
            ).fetchall()
            return row, rows

        checkpoint, entries = self._rebuilt(run, *self._query(read, snapshot=True))
        last = checkpoint.version + len(entries)
        if last != version:
            raise JournalGap(path=self._file, run=run, missing=last + 1, detail=f"rebuilding version {version}")
        return checkpoint, entries

    def get_agent(self, run: str, agent_id: str) -> AgentRecordRow | None:
        """One agent record, or None."""

        def read(conn: Conn) -> Any:
            self._require_run(conn, run)
            return conn.execute(
                "SELECT agent_id, record, updated_at, seq FROM agents WHERE run = ? AND agent_id = ?", (run, agent_id)
            ).fetchone()

        row = self._query(read)
        return self._agent_row(run, row) if row else None

    def list_agents(self, run: str) -> list[AgentRecordRow]:
        """The run's agent records in ``seq`` order (least recently written first)."""

        def read(conn: Conn) -> list[tuple[Any, ...]]:
            self._require_run(conn, run)
            return list(conn.execute(
                "SELECT agent_id, record, updated_at, seq FROM agents WHERE run = ? ORDER BY seq", (run,)
            ).fetchall())

        return [self._agent_row(run, row) for row in self._query(read)]

    def statistics(self) -> StoreStatistics:
        """Counters; ``mean_batch_size`` = operations per committed transaction."""

        def read(conn: Conn) -> tuple[int, int]:
            (journal_rows,) = conn.execute("SELECT COUNT(*) FROM journal").fetchone()
            (checkpoints,) = conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()
            return int(journal_rows), int(checkpoints)

        journal_rows, checkpoints = self._query(read)
        commits, batches = self._writer.commits, self._writer.fsync_batches
        return StoreStatistics(
            path=self._file,
            durability=self.durability,
            journal_rows=journal_rows,
            checkpoints=checkpoints,
            commits=commits,
            fsync_batches=batches,
            mean_batch_size=commits / batches if batches else 0.0,
            reconnects=self._writer.reconnects,
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
            self._writer.close()
            for claimed in list(self._claims.values()):
                claimed.release()
            self._claims.clear()
            self._close_resources()
            logger.info("closed store %s", self._file, extra=_LOG)

    # -- helpers ----------------------------------------------------------------------

    def _write_entries(self, conn: Conn, run: str, entries: list[JournalEntry], rows: list[tuple[Any, ...]]) -> None:
        """Check that ``entries`` continue the run's journal, then insert them. After a lost
        connection, entries already committed under their request ids and versions are this
        very append, committed before its acknowledgement was lost: done, not a duplicate."""
        ids = list(dict.fromkeys(e.request_id for e in entries))
        if self._fence_locks(run):
            self._fence(run, conn)  # the run's lock first, then what the checks read
            _, found, last, stored = self._append_reads(conn, run, ids, activation=False)
        else:
            activation, found, last, stored = self._append_reads(conn, run, ids, activation=run in self._epochs)
            self._check_epoch(run, activation)
        if not found:
            raise RunNotFound(path=self._file, run=run)
        if self._writer.retrying and stored and all(stored.get(e.request_id) == e.version for e in entries):
            return
        check_entries(self._file, run, last, entries, stored.get)
        self._insert_entries(conn, run, entries, rows)

    def _append_reads(
        self, conn: Conn, run: str, ids: list[str], *, activation: bool
    ) -> tuple[tuple[Any, ...] | None, bool, int, dict[str, int]]:
        """What an append checks, read in its transaction: the run's activation row (locked
        for share; only if ``activation``), whether the run is stored, its last version, and
        the versions of those of ``ids`` it recorded. One statement at a time here; a
        database with round trips reads them in one."""
        row = self._activation_row(run, conn) if activation else None
        found, last = conn.execute(
            "SELECT (SELECT 1 FROM runs WHERE name = ?), COALESCE(MAX(version), 0) FROM requests WHERE run = ?", (run, run)
        ).fetchone()
        return row, found is not None, int(last), dict(self._lookup_requests(conn, run, ids))

    def _insert_entries(self, conn: Conn, run: str, entries: list[JournalEntry], rows: list[tuple[Any, ...]]) -> None:
        """Insert checked entries: their journal rows and their request ids."""
        conn.executemany("INSERT INTO journal VALUES (?, ?, ?, ?, ?, ?)", rows)
        conn.executemany("INSERT INTO requests VALUES (?, ?, ?)", [(run, e.request_id, e.version) for e in entries])

    def _lookup_requests(self, conn: Conn, run: str, ids: list[str]) -> list[tuple[str, int]]:
        """``(request_id, version)`` of those of ``ids`` the run recorded, by its primary key."""
        rows: list[tuple[str, int]] = []
        for start in range(0, len(ids), _IDS_PER_QUERY):
            chunk = ids[start : start + _IDS_PER_QUERY]
            rows += conn.execute(
                f"SELECT request_id, version FROM requests WHERE run = ? AND request_id IN ({','.join('?' * len(chunk))})",
                (run, *chunk),
            ).fetchall()
        return rows

    def _last_version(self, conn: Conn, run: str) -> int:
        """The run's last journal version (0 before any); ``RunNotFound`` if not stored."""
        found, last = conn.execute(
            "SELECT (SELECT 1 FROM runs WHERE name = ?), COALESCE(MAX(version), 0) FROM requests WHERE run = ?", (run, run)
        ).fetchone()
        if found is None:
            raise RunNotFound(path=self._file, run=run)
        return int(last)

    def _drain_pending(self) -> None:
        """Exit mode: write the entries kept in memory; raise the first failure."""
        with self._lock:
            pending, self._pending = self._pending, []
            # Queued under the lock, so whatever another thread writes or reads after its own
            # drain (a checkpoint, a load) comes after these entries: the writer keeps order.
            futures = [self._writer.submit(_Append(self, *p)) for p in pending]
            self._draining = [f for f in self._draining if not f.done()] + futures
            in_flight = list(self._draining)  # also the entries other threads are draining now
        concurrent.futures.wait(in_flight)
        errors = [exc for exc in (f.exception() for f in futures) if exc is not None]
        for extra in errors[1:]:
            logger.error("exit-mode append failed: %s", extra, extra=_LOG)
        if errors:
            raise errors[0]

    def _require_run(self, conn: Conn, run: str) -> None:
        """Raise ``RunNotFound`` unless the run is stored."""
        if not conn.execute("SELECT 1 FROM runs WHERE name = ?", (run,)).fetchone():
            raise RunNotFound(path=self._file, run=run)

    def _parse(self, text: str, where: str) -> Any:
        """Decode a stored JSON column; ``StoreCorrupted`` naming the row if it does not parse."""
        try:
            return json.loads(text)
        except (TypeError, ValueError) as exc:
            raise StoreCorrupted(path=self._file, problem=f"{where} is not valid JSON ({exc})") from exc

    def _rebuilt(
        self, run: str, checkpoint_row: tuple[Any, ...], rows: list[tuple[Any, ...]]
    ) -> tuple[Checkpoint, list[JournalEntry]]:
        """A checkpoint row and the journal rows after it, parsed; ``JournalGap`` on a hole."""
        base, state, created = checkpoint_row
        checkpoint = Checkpoint(version=base, state=self._parse(state, f"checkpoint {base} of run {run!r}"), created_at=created)
        entries = [self._entry(run, row) for row in rows]
        check_tail(self._file, run, base, entries)
        return checkpoint, entries

    def _entry(self, run: str, row: tuple[Any, ...]) -> JournalEntry:
        """A ``journal`` row as a ``JournalEntry``; ``StoreCorrupted`` if it does not parse."""
        v, r, k, p, c = row
        try:
            return JournalEntry(version=v, request_id=r, kind=k, payload=self._parse(p, f"journal version {v} of run {run!r}"), created_at=c)
        except ValueError as exc:  # pydantic rejected a row (e.g. unknown kind)
            raise StoreCorrupted(path=self._file, problem=f"bad journal row of run {run!r}: {exc}") from exc

    def _run_info(
        self, row: tuple[Any, ...], conn: Conn, *, stored: dict[str, Any] | None = None,
        uncommitted: dict[str, str] | None = None,
    ) -> RunInfo:
        """A ``runs`` row as a ``RunInfo``, its metadata with every blob it refers to read back
        through ``conn``. A read connection sees committed rows only, so what it reads is kept
        for later; the writer's (``uncommitted``: the blobs of its own transaction) keeps nothing,
        since its transaction may still be rolled back."""
        name, state_type, created_at, token, metadata = row
        if stored is None:
            stored = self._parse(metadata, f"metadata of run {name!r}")
        known = dict(uncommitted or {})
        for digest in blob_digests(stored):
            if digest in known or digest in self._blobs:
                continue
            found = conn.execute("SELECT text FROM blobs WHERE digest = ?", (digest,)).fetchone()
            if found is None:
                raise StoreCorrupted(path=self._file, problem=f"metadata of run {name!r} refers to blob {digest}, which is missing")
            known[digest] = found[0]
        if uncommitted is None:
            self._blobs.update(known)
        meta = unpack_metadata(stored, lambda digest: known.get(digest) or self._blobs[digest])
        return RunInfo(name=name, state_type=state_type, created_at=created_at, owner_token=token, metadata=meta)

    def _packed(self, metadata: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        """``metadata`` as its row stores it (long values by digest), and the blobs it refers to."""
        try:
            return pack_metadata(metadata)
        except ValueError as exc:
            raise ValueError(f"{exc} (store {self._file})") from None

    @staticmethod
    def _insert_blobs(conn: Conn, blobs: dict[str, str]) -> None:
        """Store each blob unless a row of its digest exists (the same text: it is
        content-addressed). Asked of the database in the write's own transaction, never of
        what this process saw stored before: a collection may have deleted it since."""
        for digest, text in blobs.items():
            if conn.execute("SELECT 1 FROM blobs WHERE digest = ?", (digest,)).fetchone() is None:
                conn.execute("INSERT INTO blobs VALUES (?, ?) ON CONFLICT (digest) DO NOTHING", (digest, text))

    def _lock_runs(self, conn: Conn) -> None:
        """Hold off every other transaction's insert or update of ``runs`` until this one
        ends (a database whose write transactions are not already exclusive)."""

    def _agent_row(self, run: str, row: tuple[Any, ...]) -> AgentRecordRow:
        """An ``agents`` row as an ``AgentRecordRow``."""
        agent_id, record, updated_at, seq = row
        parsed = self._parse(record, f"record of agent {agent_id!r} in run {run!r}")
        return AgentRecordRow(agent_id=agent_id, record=parsed, updated_at=updated_at, seq=seq)


class _Append(Mergeable):
    """One ``append`` as a writer operation; the appends of one run queued one after another
    run as one (one set of checks, one insert), see :class:`~._writer.Mergeable`."""

    __slots__ = ("store", "run", "entries", "rows", "merge_key")

    def __init__(self, store: SqlStore, run: str, entries: list[JournalEntry], rows: list[tuple[Any, ...]]) -> None:
        self.store, self.run, self.entries, self.rows = store, run, entries, rows
        self.merge_key = ("append", run)

    def __call__(self, conn: Conn) -> None:
        self.store._write_entries(conn, self.run, self.entries, self.rows)

    def merged(self, later: Sequence[_Append]) -> Callable[[Conn], list[None]]:
        entries = [*self.entries, *(e for op in later for e in op.entries)]
        rows = [*self.rows, *(r for op in later for r in op.rows)]

        def write(conn: Conn) -> list[None]:
            self.store._write_entries(conn, self.run, entries, rows)
            return [None] * (1 + len(later))

        return write
