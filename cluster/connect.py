"""Connecting to Ray: an embedded local instance by default, an existing cluster by address.

soloist never asks the user to start Ray by hand. ``connect()`` is idempotent: when this
process is already connected it returns a description of that connection and changes
nothing, exactly as ``ray.init`` does with ``ignore_reinit_error``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import warnings
from collections.abc import Iterator
from typing import Any

import ray
from pydantic import BaseModel, ConfigDict
from ray._private.state import state as _ray_state  # the GCS job table (see ended_jobs)
from ray.exceptions import GetTimeoutError
from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_put  # the GCS key-value store (see shared_setting)

from cluster.local_cluster import use_token_auth

__all__ = [
    "shared_setting",
    "ClusterInfo",
    "connect",
    "ensure_connected",
    "actor_was_restarted",
    "cluster_address",
    "node_id",
    "current_job_id",
    "ended_jobs",
    "wait_ref",
    "SOLOIST_NAMESPACE",
]

_log = logging.getLogger(__name__)

#: Every named actor soloist creates (orchestrators, semaphores, pools) lives here, so that
#: drivers started in different Ray namespaces still find each other's runs.
SOLOIST_NAMESPACE = "soloist"

# Embedded Ray is sized for small machines: the object store is the part that hurts most
# when left at Ray's default (30% of RAM), so cap it unless the user says otherwise.
_EMBEDDED_OBJECT_STORE_BYTES = 512 * 1024 * 1024


class ClusterInfo(BaseModel):
    """What this process is connected to."""

    model_config = ConfigDict(frozen=True)

    address: str
    embedded: bool
    namespace: str | None
    nodes: int
    cpus: float


def _describe(embedded: bool) -> ClusterInfo:
    ctx = ray.get_runtime_context()
    resources = ray.cluster_resources()
    return ClusterInfo(
        address=ctx.gcs_address,
        embedded=embedded,
        namespace=ctx.namespace,
        nodes=sum(1 for n in ray.nodes() if n.get("Alive")),
        cpus=float(resources.get("CPU", 0.0)),
    )


def connect(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    object_store_memory: int | None = None,
    namespace: str | None = None,
    log_to_driver: bool = True,
    code_from_cwd: bool = True,
    **ray_init_kwargs: Any,
) -> ClusterInfo:
    """Connect this process to Ray and describe the connection.

    ``code_from_cwd=False`` keeps the current directory off the workers' import path (Ray
    puts it there by default, and an embedded Ray's workers start in it): for drivers, such
    as ``soloist run``, whose current directory is an untrusted repository with files named
    like modules (``pydantic/__init__.py``) that a worker would otherwise import and run.

    ``address=None`` starts an embedded local Ray (no dashboard, a small object store) unless
    ``RAY_ADDRESS`` is set; ``"auto"`` joins the cluster started on this machine by ``ray
    start``; ``"ray://host:port"`` uses Ray Client; ``"host:port"`` joins a GCS directly.
    Already connected: returns the current connection (arguments are ignored, as in Ray).

    Ray's token authentication: a new local Ray (an embedded one, ``ray start``) requires the
    token it finds in ``~/.ray/auth_token`` (or ``RAY_AUTH_TOKEN``), writing a new one there
    when there is none. Joining by ``host:port``, Ray itself sends no token; so when a token
    is available here (and ``RAY_AUTH_MODE`` is unset) this process is switched to token
    mode first, and another process's embedded Ray on this machine can be joined by its
    address. A refused join raises ``ConnectionError`` saying which token to provide.
    """
    if address is not None and not isinstance(address, str):
        raise TypeError(f"connect(address=...) takes a string such as 'auto' or 'ray://host:10001', got {type(address).__name__}")
    if address is not None and not address.strip():
        raise ValueError("connect(address=...) got an empty string; pass None for an embedded local Ray or 'auto' for a running cluster")
    if ray.is_initialized():
        return _describe(embedded=False)
    address = address or os.environ.get("RAY_ADDRESS") or None
    embedded = address is None
    kwargs: dict[str, Any] = dict(ray_init_kwargs)
    kwargs.setdefault("log_to_driver", log_to_driver)
    if namespace is not None:
        kwargs["namespace"] = namespace
    if address is None:  # embedded
        kwargs.setdefault("include_dashboard", False)
        kwargs["num_cpus"] = num_cpus if num_cpus is not None else max(2, os.cpu_count() or 2)
        kwargs["object_store_memory"] = object_store_memory or _EMBEDDED_OBJECT_STORE_BYTES
        # "local" always starts a new instance; a bare ray.init() would silently join any
        # cluster that `ray start` (or a test's Cluster) left running on this machine.
        with _working_directory(None if code_from_cwd else _TRUSTED_DIRECTORY):
            ray.init(address="local", **kwargs)
    else:
        if num_cpus is not None or object_store_memory is not None:
            raise ValueError("num_cpus and object_store_memory size an embedded Ray; a cluster joined by address keeps its own resources")
        if not address.startswith("ray://"):
            use_token_auth()
        with _working_directory(None if code_from_cwd else _TRUSTED_DIRECTORY):
            try:
                ray.init(address=address, **kwargs)
            except ConnectionError as exc:
                raise ConnectionError(
                    f"could not join the Ray cluster at {address}: {exc}. If that cluster uses Ray's token "
                    "authentication (the default for a new Ray, an embedded one included), this process must present "
                    "its token: the same ~/.ray/auth_token as the process that started it (same user and machine), or "
                    "RAY_AUTH_TOKEN=<token>; check the address too (soloist prints it as `connected to Ray at ...`)"
                ) from exc
    info = _describe(embedded=embedded)
    _log.info("connected to Ray at %s (%s, %d node(s))", info.address, "embedded" if embedded else "cluster", info.nodes, extra={"component": "cluster"})
    return info


#: Where soloist's own packages live: the only code a ``code_from_cwd=False`` worker may
#: find through the driver's directory.
_TRUSTED_DIRECTORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def _working_directory(path: str | None) -> Iterator[None]:
    """Run the block in ``path`` (None: where we are), then come back.

    ``ray.init`` records the driver's current directory for the workers' import path, and an
    embedded Ray's processes start in it.
    """
    if path is None:
        yield
        return
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def ensure_connected() -> None:
    """Start an embedded Ray on first use when nothing is connected, as Ray itself does."""
    if not ray.is_initialized():
        connect()


def cluster_address() -> str | None:
    """The GCS address (``host:port``) of the cluster this process is connected to, or None:
    what another process passes as ``--address`` / ``connect(address=...)`` to reach it."""
    if not ray.is_initialized():
        return None
    return ray.get_runtime_context().gcs_address or None


def node_id() -> str | None:
    """The id of the Ray node this process runs on (None when not connected)."""
    if not ray.is_initialized():
        return None
    return ray.get_runtime_context().get_node_id()


def actor_was_restarted() -> bool:
    """Inside an actor: True when Ray restarted it after a crash (this is not its first start)."""
    with warnings.catch_warnings():
        # Ray's own implementation of this property reads its deprecated `actor_id`.
        warnings.filterwarnings("ignore", "This API is deprecated", DeprecationWarning)
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)


def wait_ref(ref: Any, timeout: float | None = None) -> Any:
    """``ray.get(ref, timeout=timeout)`` for synchronous code (a background thread, a sync
    constructor): the same value, the same errors (``GetTimeoutError`` after ``timeout``).

    It waits on the ref's future instead: in a process that runs an async actor, Ray's
    ``ray.get`` prints "Using blocking ray.get inside async actor" from every thread,
    also from threads that block no event loop. Code that runs on an event loop awaits
    the ref instead of calling this.
    """
    future = ref.future()
    done, _ = concurrent.futures.wait([future], timeout=timeout)
    if not done:
        raise GetTimeoutError(f"Get timed out: the object {ref} was not ready within {timeout:g}s")
    return future.result()  # the value, or the error ray.get would raise


def current_job_id() -> str:
    """The id of this process's Ray job (a driver's, or the job an actor was created by)."""
    return ray.get_runtime_context().get_job_id()


def ended_jobs(job_ids: set[str]) -> set[str]:
    """Those of ``job_ids`` whose driver has exited, read from Ray's job table in the GCS.

    Ray's public job API needs the dashboard (off in tests and embedded runs); the GCS job
    table is what Ray itself reads for ``ray.util.state``, reached here through its state
    accessor. A job missing from the table is not declared ended.
    """
    if not job_ids:
        return set()
    return {entry["JobID"] for entry in _ray_state.job_table() if entry.get("IsDead") and entry["JobID"] in job_ids}


_SETTINGS_NAMESPACE = "soloist"


def shared_setting(key: str, proposed: str) -> str:
    """A value every process of the connected cluster agrees on: the first process to ask
    records ``proposed`` in the cluster's own key-value store (its GCS); every later process
    gets that record, whatever it proposes. For what must not differ between processes, e.g.
    how many run hosts a run's name is hashed over: two processes with two counts would put
    one run on two hosts. The record lives as long as the cluster."""
    _internal_kv_put(key, proposed, overwrite=False, namespace=_SETTINGS_NAMESPACE)  # first writer wins
    value = _internal_kv_get(key, namespace=_SETTINGS_NAMESPACE)
    if value is None:  # deleted in between by hand: this proposal stands
        return proposed
    return value.decode()
