"""The PostgreSQL store: the SQL store's behaviour on a server many nodes share.

Same semantics and errors as :class:`~.sqlite.SqliteStore` (both are a
:class:`~._sqlbase.SqlStore`): each group commit of the writer is one transaction on its
own connection, acknowledged only once PostgreSQL committed it (``synchronous_commit``
stays on); reads use a ``psycopg_pool.ConnectionPool``. A lost connection (the server
restarting) is retried on a new one for ``retry_for_s`` seconds - writes with the same
request ids, so nothing is applied twice - after which the calls fail with
``StoreUnreachable`` naming the server (never its password). JSON is stored as ``text``:
byte for byte what SQLite stores, compressed by PostgreSQL once a value is large.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any, TypeVar

import orjson
import psycopg
import psycopg_pool
from psycopg.conninfo import conninfo_to_dict

from ._pgclaims import ClaimKeeper, PgClaim, holder_of
from ._pgschema import advisory_key, connect, connection_lost, ensure_schema
from ._sqlbase import SqlStore
from ._url import redact
from ._writer import GroupCommitWriter
from .base import Durability, StoreHealth, dump_json
from .exceptions import RunLockedElsewhere, StoreClosed, StoreError, StoreUnreachable, StoreWriteFailed

__all__ = ["PostgresStore"]

logger = logging.getLogger(__name__)
_LOG = {"component": "store"}
T = TypeVar("T")
_READ_CONNECTIONS = 4
RETRY_ENV = "SOLOIST_STORE_RETRY_S"
DEFAULT_RETRY_S = 30.0
_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)


_VACUUM_EVERY_S = 1.0  # after compactions: the vacuums of one store, at most this often
# Each request id looked up on its own, by the primary key (a subquery per id). Joined with the
# array of ids instead, the planner - whose statistics of a table growing by thousands of rows a
# second lag far behind - reads every request of the run into a hash join once it believes the
# run small: an append's check then costs a scan growing with the run (3.2 ms a group of 64 at
# 19,200 rows, more than its inserts). Parameters: the run, then the array of ids.
_PROBE = ("SELECT ids.id, (SELECT r.version FROM requests r WHERE r.run = ? AND r.request_id = ids.id) AS version "
          "FROM unnest(?::text[]) AS ids(id)")


def _rows_json(rows: list[tuple[Any, ...]]) -> str:
    """The JSON array of an append's rows without their run: ``[version, request_id, kind,
    payload text, created_at]`` each. orjson encodes it in a tenth of the stdlib's time; its
    only other reading of these values is a NaN or an infinite ``created_at`` as ``null``,
    so those (and what orjson refuses: unpaired surrogates) take the stdlib's path."""
    values = [row[1:] for row in rows]
    if all(math.isfinite(row[5]) for row in rows):
        try:
            return orjson.dumps(values).decode()
        except TypeError:  # orjson.JSONEncodeError is one
            pass
    return dump_json(values, "journal rows")


@lru_cache(maxsize=512)
def _placeholders(text: str) -> str:
    """The shared SQL's ``?`` placeholders as psycopg's ``%s``."""
    return text.replace("%", "%%").replace("?", "%s")


def _try_xact_lock(raw: psycopg.Connection[Any], key: int) -> bool:
    """``pg_try_advisory_xact_lock(key)``: True when this transaction now holds the lock."""
    row = raw.execute("SELECT pg_try_advisory_xact_lock(%s)", (key,)).fetchone()
    assert row is not None  # a SELECT of one function call returns exactly one row
    return bool(row[0])


class _Conn:
    """A psycopg connection that speaks the shared SQL (``?`` placeholders)."""

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw

    def execute(self, text: str, params: Any = ()) -> psycopg.Cursor[Any]:
        return self.raw.execute(_placeholders(text), tuple(params))

    def executemany(self, text: str, rows: Any) -> None:
        with self.raw.cursor() as cursor:
            cursor.executemany(_placeholders(text), list(rows))


class _PgSession:
    """The writer's connection as a :class:`~._writer.WriteSession`: a transaction opens
    with its first statement, each operation in a savepoint."""

    def __init__(self, raw: psycopg.Connection[Any], location: str) -> None:
        self.raw = raw
        self.conn = _Conn(raw)
        self._location = location

    def begin(self) -> None:
        """Nothing to send: psycopg opens the transaction with the first statement."""

    def savepoint(self) -> None:
        self.raw.execute("SAVEPOINT op")

    def release(self) -> None:
        self.raw.execute("RELEASE SAVEPOINT op")

    def rollback_savepoint(self) -> None:
        self.raw.execute("ROLLBACK TO SAVEPOINT op")
        self.raw.execute("RELEASE SAVEPOINT op")

    def commit(self) -> None:
        self.raw.commit()

    def rollback(self) -> None:
        """Roll back after a failure; a failing rollback is logged (the connection is closed)."""
        try:
            self.raw.rollback()
        except psycopg.Error as exc:
            logger.error("rollback failed on %s: %s", self._location, exc, extra=_LOG)
            self.raw.close()

    def close(self) -> None:
        self.raw.close()

    def lost(self, exc: BaseException) -> bool:
        return connection_lost(exc, self.raw)

    def translate(self, exc: BaseException) -> BaseException:
        if isinstance(exc, psycopg.Error):
            return StoreWriteFailed(path=self._location, problem=str(exc).strip().splitlines()[0])
        return exc


class PostgresStore(SqlStore):
    """A durable store in a PostgreSQL database, e.g. ``postgresql://user:pass@host:5432/db``.

    The URL may choose the schema of the tables (``?options=-csearch_path%3Dname``) so that
    several soloist stores share a database. ``retry_for_s`` bounds how long a read or a
    write waits for a lost server to come back. One writer per run across every node: see
    :mod:`._pgclaims`. ``path`` is the URL without its password.
    """

    _SHARE = " FOR SHARE"  # an activation in flight waits for this write's commit, then supersedes it
    _GREATEST = "GREATEST"

    def __init__(self, url: str, *, durability: Durability = "sync", retry_for_s: float | None = None) -> None:
        """``retry_for_s`` None: ``SOLOIST_STORE_RETRY_S`` from the environment, else 30 s
        (stores opened from a URL alone - by the orchestrators' hosts, by the commands -
        take it from there)."""
        if retry_for_s is None:
            retry_for_s = float(os.environ.get(RETRY_ENV, DEFAULT_RETRY_S))
        location = redact(url)
        try:
            conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            raise ValueError(f"store {location} is not a valid PostgreSQL URL: {exc}") from None
        if retry_for_s < 0:
            raise ValueError(f"retry_for_s must be >= 0 seconds, got {retry_for_s}")
        self._init_common(location, durability)
        self._url = url  # holds the password: never log it
        self.retry_for_s = retry_for_s
        first = connect(url, location, deadline=time.monotonic() + retry_for_s)
        try:
            self._schema = ensure_schema(first, location)
        finally:
            first.close()
        self._keeper = ClaimKeeper(url, location, self._schema, retry_for_s)
        self._pool = psycopg_pool.ConnectionPool(
            url, min_size=1, max_size=_READ_CONNECTIONS, open=False, name=f"soloist-store:{location}",
            kwargs={"connect_timeout": 5}, reconnect_timeout=max(retry_for_s, 1.0),
        )
        self._pool.open(wait=False)
        self._writer = GroupCommitWriter(
            location, self._open_session, retry_for_s=retry_for_s, after_group=self._unlock_brief
        )
        self._maintenance = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"soloist-store-vacuum:{location}")
        self._vacuum_lock = threading.Lock()
        self._vacuum_queued = False
        self._vacuum_conn: psycopg.Connection[Any] | None = None
        self._last_vacuum = 0.0
        atexit.register(self.close)
        logger.info("opened store %s (durability=%s)", location, durability, extra=_LOG)

    # -- health -------------------------------------------------------------------------

    def _lookup_requests(self, conn: Any, run: str, ids: list[str]) -> list[tuple[str, int]]:
        """One primary-key probe per id (see ``_PROBE``)."""
        return conn.execute(
            f"SELECT id, version FROM ({_PROBE}) AS probed WHERE version IS NOT NULL", (run, list(ids))
        ).fetchall()

    def _append_reads(
        self, conn: Any, run: str, ids: list[str], *, activation: bool
    ) -> tuple[tuple[Any, ...] | None, bool, int, dict[str, int]]:
        """An append's reads in ONE statement (one round trip where they took four)."""
        locked = "SELECT epoch, holder FROM activations WHERE run = ? FOR SHARE" if activation else (
            "SELECT NULL::bigint AS epoch, NULL::text AS holder WHERE false")
        epoch, holder, found, last, found_ids, found_versions = conn.execute(
            f"WITH activation AS ({locked}), "
            f"found AS (SELECT id, version FROM ({_PROBE}) AS probed WHERE version IS NOT NULL) "
            "SELECT (SELECT epoch FROM activation), (SELECT holder FROM activation), "
            "(SELECT 1 FROM runs WHERE name = ?), (SELECT COALESCE(MAX(version), 0) FROM requests WHERE run = ?), "
            "(SELECT array_agg(id) FROM found), (SELECT array_agg(version) FROM found)",
            ((run,) if activation else ()) + (run, list(ids), run, run),
        ).fetchone()
        row = (epoch, holder) if epoch is not None else None
        return row, found is not None, int(last), dict(zip(found_ids or (), found_versions or ()))

    def _insert_entries(self, conn: Any, run: str, entries: list[Any], rows: list[tuple[Any, ...]]) -> None:
        """Journal rows and request ids in ONE statement, the rows as ONE JSON parameter: one
        round trip per append, and one C-encoded string where five arrays took psycopg about
        14 us a row to adapt (a third of the writer's time). Read as ``jsonb``: parsed once,
        where ``json`` parsed each element again for each of its five fields (the server's CPU
        per entry 13.5-14.6 us against 20.8-22.4)."""
        conn.execute(
            "WITH entries AS (SELECT (e->>0)::bigint AS version, e->>1 AS request_id, e->>2 AS kind, e->>3 AS payload, "
            "(e->>4)::float8 AS created_at FROM jsonb_array_elements(?::jsonb) AS e), "
            "journalled AS (INSERT INTO journal SELECT ?, version, request_id, kind, payload, created_at FROM entries) "
            "INSERT INTO requests SELECT ?, request_id, version FROM entries",
            (_rows_json(rows), run, run),
        )

    def health(self) -> StoreHealth:
        """Whether the server answers now (one attempt, no retries): its version and the
        latency of a trivial query, or the error."""
        started = time.perf_counter()
        try:
            with psycopg.connect(self._url, connect_timeout=5) as conn:
                began = time.perf_counter()
                conn.execute("SELECT 1").fetchone()
                latency = time.perf_counter() - began
                version = conn.info.parameter_status("server_version") or "?"
        except psycopg.Error as exc:
            return StoreHealth(location=self._file, kind="postgresql", reachable=False,
                               error=str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                               latency_ms=(time.perf_counter() - started) * 1000)
        return StoreHealth(location=self._file, kind="postgresql", reachable=True, server=f"PostgreSQL {version}",
                           latency_ms=latency * 1000)

    # -- what SqlStore asks of a database -----------------------------------------------

    def _open_session(self, deadline: float | None) -> _PgSession:
        if deadline is None:
            deadline = time.monotonic() + self.retry_for_s
        raw = connect(self._url, self._file, deadline=deadline)
        if self._claims:  # the server restarted: its claims ended with their connection
            for run in self._keeper.reassert():
                self._claims.pop(run, None)
        return _PgSession(raw, self._file)

    def _query(self, fn: Callable[[Any], T], *, snapshot: bool = False) -> T:
        """Run ``fn`` on a pooled connection in one transaction (a repeatable-read snapshot
        with ``snapshot``), again on another while the server is unreachable."""
        started = time.monotonic()
        attempt = 0
        while True:
            if self._closed:
                raise StoreClosed(path=self._file)
            try:
                with self._pool.connection(timeout=max(0.1, started + self.retry_for_s - time.monotonic())) as raw:
                    try:
                        if snapshot:
                            raw.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                        return fn(_Conn(raw))
                    except psycopg.Error as exc:
                        if not connection_lost(exc, raw):
                            raise StoreError(f"could not read store {self._file}: {exc}", path=self._file) from exc
                        problem = str(exc).strip().splitlines()[0]
            except psycopg_pool.PoolTimeout as exc:
                problem = f"no connection within {self.retry_for_s:.1f} s ({exc})"
            except psycopg.OperationalError as exc:  # the connection broke while the pool returned it
                problem = str(exc).strip().splitlines()[0]
            waited = time.monotonic() - started
            if waited >= self.retry_for_s:
                raise StoreUnreachable(path=self._file, problem=problem, waited_s=waited)
            if attempt == 0:
                logger.warning("store %s: read failed (%s); retrying", self._file, problem, extra=_LOG)
            time.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])
            attempt += 1

    def _claim(self, run: str, holder: dict[str, Any], timeout: float) -> PgClaim:
        return self._keeper.claim(run, holder, timeout)

    def _check_claim(self, run: str) -> None:
        key = advisory_key(self._schema, run)

        def probe(conn: _Conn) -> dict[str, Any] | None:
            return None if _try_xact_lock(conn.raw, key) else holder_of(conn.raw, run)

        held = self._query(probe)
        if held is not None:
            raise RunLockedElsewhere(path=self._file, run=run, holder=held)

    def _lock_briefly(self, conn: _Conn, run: str) -> None:
        if not _try_xact_lock(conn.raw, advisory_key(self._schema, run)):
            raise RunLockedElsewhere(path=self._file, run=run, holder=holder_of(conn.raw, run))

    def _run_deleted(self, conn: Any, run: str) -> None:
        # A holder record outlives a writer that crashed (the server drops only its lock). Held
        # here, it goes at release; held nowhere (this write took the lock), it goes now.
        if run not in self._claims and run not in self._epochs:
            conn.execute("DELETE FROM writer_claims WHERE run = ?", (run,))

    def _lock_runs(self, conn: Any) -> None:
        # SHARE conflicts with the ROW EXCLUSIVE lock every INSERT and UPDATE takes: it waits
        # for the transactions that wrote a run to end, and holds off the next ones.
        conn.execute("LOCK TABLE runs IN SHARE MODE")

    def _compacted(self) -> None:
        """Vacuum the tables compaction deletes from, in the background: PostgreSQL reuses a
        deleted row's space only once a vacuum has seen it, and autovacuum wakes only every
        minute or so, so a run with retention would otherwise grow as if it kept everything.
        One vacuum at a time, and none within ``_VACUUM_EVERY_S`` of the last one's start
        (the next compaction's vacuum, or autovacuum, covers what it skips)."""
        with self._vacuum_lock:
            now = time.monotonic()
            if self._vacuum_queued or self._closed or now < self._last_vacuum + _VACUUM_EVERY_S:
                return
            self._vacuum_queued, self._last_vacuum = True, now
        try:
            self._maintenance.submit(self._vacuum)
        except RuntimeError:  # the store closed since the check above: nothing is left to vacuum for
            logger.debug("store %s closed before its vacuum after compaction", self.path, extra=_LOG)

    def _vacuum(self) -> None:
        try:
            if self._vacuum_conn is None or self._vacuum_conn.closed:
                self._vacuum_conn = connect(self._url, self._file, deadline=None, autocommit=True)
            self._vacuum_conn.execute("VACUUM journal, requests, checkpoints")
        except (StoreError, psycopg.Error) as exc:  # maintenance: the next compaction tries again
            logger.warning("store %s: vacuum after compaction failed: %s", self.path, exc, extra=_LOG)
            if self._vacuum_conn is not None:
                self._vacuum_conn.close()
                self._vacuum_conn = None
        finally:
            with self._vacuum_lock:
                self._vacuum_queued = False

    def _close_resources(self) -> None:
        self._keeper.close()
        self._maintenance.shutdown(wait=True, cancel_futures=True)
        if self._vacuum_conn is not None:
            self._vacuum_conn.close()
        self._pool.close()
        atexit.unregister(self.close)
