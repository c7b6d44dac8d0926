"""One writer per run on a PostgreSQL store: session-level advisory locks, across nodes.

A store's claims are session-level ``pg_try_advisory_lock``\\ s held on one dedicated
connection of that store. The server drops them when that connection ends, however its
process ends (``close()``, a crash, SIGKILL, a lost node), so a dead writer never blocks
the next one. The holder records itself in ``writer_claims`` for whoever is refused next.
A write from a store that holds no claim takes the same key as a transaction-level lock
(``pg_try_advisory_xact_lock``), released at its commit, and is refused while a claim is held.
A database restart ends the claims' connection too: :meth:`ClaimKeeper.reassert` takes
them again on a new connection (the writer calls it after it reconnected).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from typing import Any

import psycopg

from ._pgschema import advisory_key, connect, connection_lost
from .exceptions import RunLockedElsewhere

__all__ = ["ClaimKeeper", "PgClaim", "holder_of"]

logger = logging.getLogger(__name__)
_LOG = {"component": "store"}
_RETRY_SECONDS = 0.05


def holder_of(conn: Any, run: str) -> dict[str, Any]:
    """What the run's claim holder recorded about itself ({} if nothing)."""
    row = conn.execute("SELECT holder FROM writer_claims WHERE run = %s", (run,)).fetchone()
    try:
        found = json.loads(row[0]) if row else {}
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


class PgClaim:
    """The claim of one run, held by a :class:`ClaimKeeper` until ``release()``."""

    def __init__(self, keeper: ClaimKeeper, run: str) -> None:
        self._keeper = keeper
        self.run = run

    def release(self) -> None:
        """Give the run up (idempotent); the holder record is removed first."""
        self._keeper.release(self.run)


class ClaimKeeper:
    """The dedicated connection of a store's claims and the runs it holds."""

    def __init__(self, conninfo: str, location: str, schema: str, retry_for_s: float) -> None:
        self._conninfo = conninfo
        self._location = location
        self._schema = schema
        self._retry_for_s = retry_for_s
        self._lock = threading.Lock()  # guards _conn and _held
        self._conn: psycopg.Connection[Any] | None = None  # opened with the first claim
        self._held: dict[str, dict[str, Any]] = {}  # run -> holder record, for each lock held on _conn

    def claim(self, run: str, holder: dict[str, Any], timeout: float) -> PgClaim:
        """Take the run's lock, waiting up to ``timeout`` seconds for a holder to let go;
        ``RunLockedElsewhere`` naming the holder otherwise."""
        record = {"pid": os.getpid(), "host": socket.gethostname(), **holder, "since": time.time()}
        deadline = time.monotonic() + timeout
        with self._lock:
            conn = self._connection()
            while not self._try(conn, run):
                if time.monotonic() >= deadline:
                    raise RunLockedElsewhere(path=self._location, run=run, holder=holder_of(conn, run))
                time.sleep(_RETRY_SECONDS)
            self._record(conn, run, record)
            self._held[run] = record
        logger.info("claimed run %r of %s for writing", run, self._location, extra=_LOG)
        return PgClaim(self, run)

    def release(self, run: str) -> None:
        """Unlock ``run`` (idempotent); a connection already gone released it already."""
        with self._lock:
            if self._held.pop(run, None) is None or self._conn is None:
                return
            try:
                self._conn.execute("DELETE FROM writer_claims WHERE run = %s", (run,))
                self._conn.execute("SELECT pg_advisory_unlock(%s)", (advisory_key(self._schema, run),))
            except psycopg.Error as exc:
                if not connection_lost(exc, self._conn):
                    raise
                logger.warning("claim of run %r ended with its connection (%s)", run, exc, extra=_LOG)

    def reassert(self) -> list[str]:
        """After a lost connection: take every held claim again on a new connection; return
        the runs another process claimed in between (they are no longer held here)."""
        with self._lock:
            if not self._held or not self._dead():
                return []
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            conn = self._connection()
            lost = [run for run in self._held if not self._try(conn, run)]
            for run in lost:
                logger.error("the claim of run %r was taken by another writer while %s was unreachable",
                             run, self._location, extra=_LOG)
                del self._held[run]
            for run, record in self._held.items():
                self._record(conn, run, record)
            return lost

    def close(self) -> None:
        """Close the connection: the server drops every claim it held."""
        with self._lock:
            self._held.clear()
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = connect(self._conninfo, self._location, deadline=time.monotonic() + self._retry_for_s,
                                 autocommit=True)
        return self._conn

    def _dead(self) -> bool:
        """True when the claims' connection no longer answers (the server restarted)."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            return True
        try:
            self._conn.execute("SELECT 1")
        except psycopg.Error as exc:
            return connection_lost(exc, self._conn)
        return False

    def _try(self, conn: psycopg.Connection[Any], run: str) -> bool:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (advisory_key(self._schema, run),)).fetchone()
        return bool(row and row[0])

    def _record(self, conn: psycopg.Connection[Any], run: str, record: dict[str, Any]) -> None:
        conn.execute(
            "INSERT INTO writer_claims VALUES (%s, %s, %s) ON CONFLICT (run) DO UPDATE SET "
            "holder = excluded.holder, since = excluded.since",
            (run, json.dumps(record), time.time()),
        )
