"""Where a scope lives: a fixed number of service actors, a scope on one of them by a stable
hash of its name.

Every process computes the same placement from the scope's name alone (no directory to ask,
no Ray round trip), so the count is a constant of the code, not a setting: two processes
that disagreed on it would place one scope on two services and break its cap.

The handles of the services are cached per process and per Ray session (the registry's
``semaphore.services`` table): finding a named actor is a round trip to Ray's control store.
"""

from __future__ import annotations

import hashlib
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster.connect import SOLOIST_NAMESPACE
from cluster.process import Table, process_registry
from cluster.semaphore._service import SemaphoreService

__all__ = ["SERVICE_COUNT", "service_index", "service_name", "service_names", "service_for", "running_service", "forget_service"]

SERVICE_COUNT = 2
"""How many service actors hold the lease tables of every scope of the cluster."""

_SERVICE_PREFIX = "soloist:sem-service:"
_PLACEMENT_MEMORY_BYTES = 1

# service name -> its handle, per Ray session (see ``cluster.process``).
_SERVICES: Table[str, Any] = process_registry().semaphore_services


def service_index(scope: str) -> int:
    """The service that holds ``scope``: a hash of its name that every process agrees on
    (``hash()`` is salted per process, so a digest instead)."""
    digest = hashlib.blake2b(scope.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % SERVICE_COUNT


def service_name(scope: str) -> str:
    """The name (in namespace ``soloist``) of the actor that holds ``scope``."""
    return f"{_SERVICE_PREFIX}{service_index(scope)}"


def service_names() -> list[str]:
    """The names of every service actor, started or not."""
    return [f"{_SERVICE_PREFIX}{i}" for i in range(SERVICE_COUNT)]


def service_for(scope: str) -> Any:
    """The handle of the service that holds ``scope``, started if it is not up yet.

    Detached and restarted by Ray whenever it dies (its tables are then rebuilt, see
    ``SemaphoreService``). Prefers the starting process's node (the driver's, usually the
    head): worker nodes come and go, and every restart costs its scopes a recovery window.
    """
    name = service_name(scope)
    return _SERVICES.get_or_create(name, lambda: _start(name))


def running_service(scope: str) -> Any | None:
    """The handle of the service that holds ``scope`` if it runs, else None (never starts one)."""
    name = service_name(scope)
    cached = _SERVICES.get(name)
    if cached is not None:
        return cached
    try:
        handle = ray.get_actor(name, namespace=SOLOIST_NAMESPACE)
    except ValueError:
        return None
    return _SERVICES.get_or_create(name, lambda: handle)


def forget_service(name: str, handle: Any) -> None:
    """Drop a cached handle (its actor was killed for good: the next lookup starts a new one)."""
    _SERVICES.discard(name, handle)


def _start(name: str) -> Any:
    return SemaphoreService.options(  # type: ignore[attr-defined]
        name=name,
        namespace=SOLOIST_NAMESPACE,
        get_if_exists=True,
        lifetime="detached",
        max_restarts=-1,
        num_cpus=0,
        # Ray ignores a node affinity, even a soft one, for an actor that needs no resources
        # and puts it on a random node: a service would land on a worker node (and restart,
        # costing its scopes a recovery window, when that node goes). One byte of the logical
        # memory resource every node has makes it honour the affinity.
        memory=_PLACEMENT_MEMORY_BYTES,
        scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True),
    ).remote(name)
