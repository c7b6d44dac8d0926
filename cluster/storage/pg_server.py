"""Throw-away PostgreSQL servers: the store tests', the crash tests' and the benchmarks'.

:class:`PostgresServer` runs ``initdb`` into a temporary directory and ``pg_ctl start`` on a
free local port (as the ``postgres`` system user when we are root: the server refuses to
run as root), and can stop it the hard way (``pg_ctl stop -m immediate``) and start it again.
Each test gets a schema of its own (:meth:`PostgresServer.fresh_url`). With
``SOLOIST_TEST_POSTGRES_URL`` set, :func:`shared_server` uses that server instead of
starting one (nothing is then stopped or restarted); the benchmarks pass
``SOLOIST_BENCH_POSTGRES_URL`` (:data:`BENCH_ENV_URL`) instead.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
import pathlib
import typing
import urllib.parse

import psycopg

__all__ = ["BENCH_ENV_URL", "ENV_URL", "USER_WITH_PASSWORD", "PostgresServer", "postgres_bin_dir", "schema_url", "shared_server"]

ENV_URL = "SOLOIST_TEST_POSTGRES_URL"
BENCH_ENV_URL = "SOLOIST_BENCH_POSTGRES_URL"
USER_WITH_PASSWORD = ("soloist_pw", "right-password")  # a role that must log in with a password
_HBA = """\
local all all trust
host all {user} 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
"""


def postgres_bin_dir() -> pathlib.Path | None:
    """Where ``initdb`` and ``pg_ctl`` are: on PATH, or Debian's /usr/lib/postgresql/*/bin."""
    found = shutil.which("pg_ctl")
    if found:
        return pathlib.Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return pathlib.Path(versions[-1]).parent if versions else None


def schema_url(base: str, schema: str) -> str:
    """``base`` with its search path set to ``schema`` (the URL form the README documents)."""
    separator = "&" if "?" in base else "?"
    return f"{base}{separator}options={urllib.parse.quote(f'-csearch_path={schema}')}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """One PostgreSQL server of our own, in a temporary directory (or an existing one)."""

    def __init__(self, external_url: str | None = None) -> None:
        self.external = external_url is not None
        self._root: pathlib.Path | None = None
        self.port = 0
        self.base_url = external_url or ""
        self._schemas: list[str] = []

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> PostgresServer:
        """``initdb`` (first time) and ``pg_ctl start``; create the ``soloist`` database."""
        if self.external:
            return self
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL is not installed (no pg_ctl on PATH or in /usr/lib/postgresql); "
                               f"install Debian's postgresql package or set {ENV_URL}")
        self._bin = bin_dir
        if self._root is None:
            self._root = pathlib.Path(tempfile.mkdtemp(prefix="soloist-pg-"))
            os.chmod(self._root, 0o755)
            self._chown(self._root)  # the server writes its log and socket beside its data
            self._data.mkdir()
            self._chown(self._data)
            self._run("initdb", "-D", str(self._data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
            (self._data / "pg_hba.conf").write_text(_HBA.format(user=USER_WITH_PASSWORD[0]))
            self.port = _free_port()
            self.base_url = f"postgresql://postgres@127.0.0.1:{self.port}/soloist"
            self._pg_ctl_start()
            admin = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute("CREATE DATABASE soloist")
                user, password = USER_WITH_PASSWORD
                conn.execute(f"CREATE ROLE {user} LOGIN PASSWORD '{password}' SUPERUSER")
        else:
            self._pg_ctl_start()
        return self

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m <mode>`` (``immediate``: as a crash, no shutdown checkpoint)."""
        if self.external:
            raise RuntimeError(f"cannot stop the server of {ENV_URL}")
        self._run("pg_ctl", "-D", str(self._data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        """Stop the server (if it runs) and delete its directory; idempotent."""
        if self.external or self._root is None:
            self.drop_schemas()
            return
        if (self._data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self._data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self._root, ignore_errors=True)
        self._root = None

    # -- databases for tests --------------------------------------------------------------

    def fresh_url(self) -> str:
        """A URL whose tables go to a new, empty schema (so tests never see each other's rows)."""
        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.base_url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        self._schemas.append(schema)
        return schema_url(self.base_url, schema)

    def drop_schemas(self) -> None:
        """Drop every schema :meth:`fresh_url` made (an external server is left as found)."""
        schemas, self._schemas = self._schemas, []
        if not schemas:
            return
        with psycopg.connect(self.base_url, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    def connect(self, url: str) -> psycopg.Connection[typing.Any]:
        """A plain autocommit connection, to count rows behind the store's back."""
        return psycopg.connect(url, autocommit=True)

    # -- helpers ----------------------------------------------------------------------

    @property
    def _data(self) -> pathlib.Path:
        assert self._root is not None
        return self._root / "data"

    def _pg_ctl_start(self) -> None:
        root = self._root
        assert root is not None  # start() makes the directory before it starts the server
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={root} -c fsync=on"
        self._run("pg_ctl", "-D", str(self._data), "-l", str(root / "server.log"), "-o", options, "-w", "start")

    def _chown(self, path: pathlib.Path) -> None:
        if os.getuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _run(self, program: str, *args: str) -> None:
        command = [str(self._bin / program), *args]
        if os.getuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd="/")
        if done.returncode != 0:
            log = self._root / "server.log" if self._root else None
            tail = log.read_text()[-2000:] if log and log.exists() else ""
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip()}\n{tail}")


def shared_server(env: str = ENV_URL) -> PostgresServer:
    """The server of the URL in environment variable ``env`` (``SOLOIST_TEST_POSTGRES_URL`` by
    default), or a new throw-away one, started. ``destroy()`` stops only what was started."""
    return PostgresServer(os.environ.get(env)).start()
