"""A local Ray cluster that soloist starts, finds again, and stops: ``soloist up`` / ``down``.

``start_local_cluster`` runs ``ray start --head --block`` in its own session, on free ports,
and writes a record (address, pid, ports, log file) to ``$SOLOIST_HOME/local-cluster.json``
(default ``~/.soloist``). ``soloist run`` joins the cluster of a live record instead of
starting an embedded Ray, which saves Ray's start-up on every run. ``stop_local_cluster``
sends SIGTERM to the recorded ``ray start --block`` process only, after checking that the
pid still runs that very command; Ray's own handler then stops the processes it started.
Nothing here ever stops a cluster that soloist did not start (no ``ray stop``).

Record lifecycle: absent -> ``live`` (pid runs our command and the GCS port answers) ->
``stale`` (the process is gone or the pid was reused); a stale record is ignored by
``soloist run`` and removed by ``soloist down`` or the next ``soloist up``.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from ray.util import get_node_ip_address

from cluster.exceptions import LocalClusterError

_enable_token_auth: Callable[..., bool] | None  # None: this Ray has no token authentication
try:  # Ray's token authentication: a private module of the Ray versions that have it
    from ray._private.authentication.authentication_token_setup import (
        maybe_enable_token_auth_if_token_available as _enable_token_auth,
    )
except ImportError:
    _enable_token_auth = None

__all__ = [
    "LocalCluster",
    "joinable",
    "local_cluster",
    "record_path",
    "start_local_cluster",
    "stop_local_cluster",
    "use_token_auth",
]

_RECORD = "local-cluster.json"
_READY_MARK = "Ray runtime started"
#: Where the head's processes start: soloist's own source root, never a user's repository.
_TRUSTED_DIRECTORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OBJECT_STORE_BYTES = 512 * 1024 * 1024


class LocalCluster(BaseModel):
    """The record of a cluster started by ``soloist up``."""

    model_config = ConfigDict(frozen=True)

    address: str
    """The GCS address to join (``host:port``)."""
    pid: int
    """The ``ray start --head --block`` process; SIGTERM to it stops the whole cluster."""
    port: int
    started_at: str
    log: str
    """The head command's output (Ray's start-up messages)."""
    num_cpus: int
    token_auth: bool = False
    """The head requires Ray's authentication token (Ray's default for new clusters since 2.5x);
    a driver joining it must then run with ``RAY_AUTH_MODE=token``."""
    status: Literal["live", "stale"] = "live"


def soloist_home() -> Path:
    """``$SOLOIST_HOME`` or ``~/.soloist``: where soloist keeps its per-user files."""
    return Path(os.environ.get("SOLOIST_HOME") or Path.home() / ".soloist")


def record_path() -> Path:
    return soloist_home() / _RECORD


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cmdline(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\x00", b" ").decode(errors="replace")
    except OSError:
        return None


def _runs_our_head(record: LocalCluster) -> bool:
    """The pid is alive and still runs the ``ray start --block`` we launched (not a reused pid)."""
    cmdline = _cmdline(record.pid)
    if cmdline is None:
        try:
            os.kill(record.pid, 0)
        except OSError:
            return False
        return sys.platform != "linux"  # no /proc: trust the pid
    return "--block" in cmdline and f"--port={record.port}" in cmdline


def _answers(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def local_cluster() -> LocalCluster | None:
    """The recorded cluster, ``status`` "live" or "stale"; None when nothing is recorded.

    A record that cannot be read raises ``LocalClusterError`` naming the file."""
    path = record_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LocalClusterError(f"cannot read the local cluster record {str(path)!r}: {exc.strerror or exc}") from exc
    try:
        record = LocalCluster.model_validate_json(text)
    except ValidationError as exc:
        raise LocalClusterError(
            f"the local cluster record {str(path)!r} is not a soloist record ({exc.error_count()} problem(s)); "
            "remove it if no cluster started by `soloist up` is running"
        ) from exc
    live = _runs_our_head(record) and _answers(record.address)
    return record.model_copy(update={"status": "live" if live else "stale"})


def _write(record: LocalCluster) -> None:
    path = record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(record.model_dump(exclude={"status"}), indent=2), encoding="utf-8")
    os.replace(temporary, path)


def _node_ip() -> str:
    return str(get_node_ip_address())


def start_local_cluster(*, num_cpus: int | None = None, timeout: float = 120.0) -> tuple[LocalCluster, bool]:
    """Start the local cluster, or find the live one; ``(record, started_now)``.

    Raises ``LocalClusterError`` (with the tail of Ray's output) when the head does not come
    up within ``timeout`` seconds; nothing is left running then."""
    existing = local_cluster()
    if existing is not None and existing.status == "live":
        return existing, False
    home = soloist_home()
    home.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    cpus = num_cpus if num_cpus is not None else max(2, os.cpu_count() or 2)
    log = home / f"local-cluster-{port}.log"
    command = [
        sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())",
        "start", "--head", "--block", f"--port={port}", f"--num-cpus={cpus}",
        f"--object-store-memory={_OBJECT_STORE_BYTES}", "--include-dashboard=false", "--disable-usage-stats",
        f"--dashboard-agent-listen-port={_free_port()}",
    ]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   cwd=_TRUSTED_DIRECTORY, start_new_session=True)
    record = LocalCluster(address=f"{_node_ip()}:{port}", pid=process.pid, port=port, num_cpus=cpus, log=str(log),
                          started_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LocalClusterError(f"Ray's head exited with code {process.returncode} while starting: {_tail(log)}")
        output = log.read_text(errors="replace")
        if _READY_MARK in output and _answers(record.address):
            record = record.model_copy(update={"token_auth": "Token authentication is enabled" in output})
            _write(record)
            return record, True
        time.sleep(0.2)
    _terminate(process.pid, 30.0)
    raise LocalClusterError(f"Ray's head did not start within {timeout:g}s: {_tail(log)}")


def _tail(log: Path, lines: int = 5) -> str:
    try:
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no output)"


def _terminate(pid: int, timeout: float) -> bool:
    """SIGTERM, wait, then SIGKILL; True once the process is gone."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return True
            if _cmdline(pid) is None and not _alive(pid):
                return True
            time.sleep(0.2)
    return not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    status = Path(f"/proc/{pid}/status")
    with contextlib.suppress(OSError):
        return "\nState:\tZ" not in status.read_text()
    return True


def joinable() -> LocalCluster | None:
    """The live cluster ``soloist up`` started, ready to join: when it requires Ray's token,
    this process is switched to token authentication (unless ``RAY_AUTH_MODE`` is set)."""
    record = local_cluster()
    if record is None or record.status != "live":
        return None
    if record.token_auth and "RAY_AUTH_MODE" not in os.environ:
        use_token_auth()
    return record


def use_token_auth() -> None:
    """Switch this process to Ray's token authentication, as ``ray.init()`` does by itself for
    a cluster it finds with ``address="auto"`` (but not for one given by address)."""
    if _enable_token_auth is None:  # a Ray without token authentication: nothing to switch on
        return
    _enable_token_auth(warn_if_disabled=False)


def stop_local_cluster(*, timeout: float = 60.0) -> LocalCluster | None:
    """Stop the cluster ``soloist up`` started and forget it; None when none is recorded.

    A stale record is removed without signalling anything (its pid may belong to someone else)."""
    record = local_cluster()
    if record is None:
        return None
    if record.status == "live" or _runs_our_head(record):
        if not _terminate(record.pid, timeout):
            raise LocalClusterError(f"the cluster's head (pid {record.pid}) did not stop within {timeout:g}s")
    record_path().unlink(missing_ok=True)
    return record
