"""The PostgreSQL side of a store: connecting (with retries), the schema, its migrations.

The tables live in the connection's current schema (the first of its ``search_path``; a URL
chooses one with ``?options=-csearch_path%3Dname``, and a missing one is created), so many
soloist databases can share one PostgreSQL database. ``soloist_schema`` holds the schema
version; opening creates or migrates the tables in one transaction under an advisory lock,
so two processes opening one database at once migrate it once. A newer schema than this
soloist knows is refused with ``SchemaTooNew`` and left untouched.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any

import psycopg
from psycopg import sql

from ._schema import SCHEMA_VERSION
from .exceptions import SchemaTooNew, StoreError, StoreUnreachable

__all__ = ["advisory_key", "connect", "connection_lost", "ensure_schema", "permanent"]

logger = logging.getLogger(__name__)
_LOG = {"component": "store"}
_CONNECT_TIMEOUT_S = 5
_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)  # waits between reconnection attempts, the last repeated

_TABLES_V1 = """
CREATE TABLE IF NOT EXISTS runs(name TEXT PRIMARY KEY, state_type TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
                  owner_token TEXT NOT NULL, metadata TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints(run TEXT NOT NULL, version BIGINT NOT NULL, state TEXT NOT NULL,
                         created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (run, version));
CREATE TABLE IF NOT EXISTS journal(run TEXT NOT NULL, version BIGINT NOT NULL, request_id TEXT NOT NULL,
                     kind TEXT NOT NULL, payload TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
                     PRIMARY KEY (run, version));
CREATE TABLE IF NOT EXISTS requests(run TEXT NOT NULL, request_id TEXT NOT NULL, version BIGINT NOT NULL,
                      PRIMARY KEY (run, request_id));
CREATE INDEX IF NOT EXISTS requests_by_version ON requests(run, version);
CREATE TABLE IF NOT EXISTS agents(run TEXT NOT NULL, agent_id TEXT NOT NULL, record TEXT NOT NULL,
                    updated_at DOUBLE PRECISION NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (run, agent_id));
CREATE INDEX IF NOT EXISTS agents_by_seq ON agents(run, seq);
"""
# Schema 2 (as SQLite's): each run's fencing epoch, and who holds each run's writer claim.
_TABLES_V2 = """
CREATE TABLE IF NOT EXISTS activations(run TEXT PRIMARY KEY, epoch BIGINT NOT NULL, holder TEXT NOT NULL,
                         since DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS writer_claims(run TEXT PRIMARY KEY, holder TEXT NOT NULL, since DOUBLE PRECISION NOT NULL);
"""
# Schema 3 (as SQLite's): long metadata values stored once per store under their digest.
_TABLES_V3 = """
CREATE TABLE IF NOT EXISTS blobs(digest TEXT PRIMARY KEY, text TEXT NOT NULL);
"""
_MIGRATIONS = {1: _TABLES_V2, 2: _TABLES_V3}  # from version N to N+1
_PERMANENT = ("authentication", "does not exist", "no pg_hba.conf entry", "permission denied")


def advisory_key(schema: str, name: str) -> int:
    """A stable 64-bit advisory-lock key for ``name`` in one schema (advisory locks are
    per database, so the schema is part of the key)."""
    digest = hashlib.sha256(f"soloist\0{schema}\0{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def connection_lost(exc: BaseException, conn: psycopg.Connection[Any] | None) -> bool:
    """True when ``exc`` means the server went away (restart, crash, network), so the same
    work may be tried again on a new connection; False for any other failure."""
    if isinstance(exc, (psycopg.errors.AdminShutdown, psycopg.errors.CrashShutdown, psycopg.errors.CannotConnectNow)):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    return conn is None or conn.broken or conn.closed


def permanent(exc: BaseException) -> bool:
    """True for a connection failure that no retry mends (bad password, unknown database)."""
    text = str(exc).lower()
    return any(word in text for word in _PERMANENT)


def connect(conninfo: str, location: str, *, deadline: float | None, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A new connection; while the server is unreachable (refused, starting up, shutting
    down) tried again until ``deadline`` (``time.monotonic``; None: once). A failure no retry
    mends, or the deadline passed, raises ``StoreUnreachable`` naming ``location``."""
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            return psycopg.connect(conninfo, autocommit=autocommit, connect_timeout=_CONNECT_TIMEOUT_S)
        except psycopg.Error as exc:
            waited = time.monotonic() - started
            if permanent(exc) or deadline is None or time.monotonic() >= deadline:
                raise StoreUnreachable(path=location, problem=_first_line(exc), waited_s=waited) from exc
            if attempt == 0:
                logger.warning("store %s is unreachable (%s); retrying", location, _first_line(exc), extra=_LOG)
            time.sleep(min(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)], max(0.0, deadline - time.monotonic())))
            attempt += 1


def ensure_schema(conn: psycopg.Connection[Any], location: str) -> str:
    """Create the tables on a new database, migrate an older one in place, refuse a newer
    one (``SchemaTooNew``); return the schema the tables live in. One transaction, under an
    advisory lock: processes opening one database at once wait for each other."""
    try:
        with conn.transaction():
            schema = _current_schema(conn, location)
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key(schema, "schema"),))
            conn.execute("CREATE TABLE IF NOT EXISTS soloist_schema(version INTEGER NOT NULL)")
            row = conn.execute("SELECT MAX(version) FROM soloist_schema").fetchone()
            found = row[0] if row else None
            if found is None:
                conn.execute(_TABLES_V1 + _TABLES_V2 + _TABLES_V3)
                conn.execute("INSERT INTO soloist_schema VALUES (%s)", (SCHEMA_VERSION,))
                logger.info("created the soloist schema %d in %s (schema %s)", SCHEMA_VERSION, location, schema, extra=_LOG)
            elif found > SCHEMA_VERSION:
                raise SchemaTooNew(path=location, found=found, supported=SCHEMA_VERSION)
            elif found < SCHEMA_VERSION:
                for version in range(found, SCHEMA_VERSION):
                    conn.execute(_MIGRATIONS[version])
                conn.execute("UPDATE soloist_schema SET version = %s", (SCHEMA_VERSION,))
                logger.info("migrated %s from schema %d to %d", location, found, SCHEMA_VERSION, extra=_LOG)
    except psycopg.Error as exc:
        raise StoreError(f"could not prepare store {location}: {_first_line(exc)}", path=location) from exc
    return schema


def _current_schema(conn: psycopg.Connection[Any], location: str) -> str:
    """The schema new tables go to; the first schema of ``search_path`` is created if missing."""
    row = conn.execute("SELECT current_schema()").fetchone()
    if row and row[0]:
        return str(row[0])
    path = conn.execute("SELECT current_setting('search_path')").fetchone()
    first = str(path[0] if path else "").split(",")[0].strip().strip('"')
    if not first or first == "$user":
        raise StoreError("no schema to create the tables in: set search_path to a schema name", path=location)
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(first)))
    return first


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
