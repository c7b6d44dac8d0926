"""One per-process registry of what this process keeps between calls.

Owns every process-wide table of soloist, each a declared attribute of ``ProcessRegistry``
(not a name looked up at run time): the warm semaphore permits and subagent pools of
handoffs, the runs that follow those pools' replicas, the keys of callers without a
``pool_key``, the handles of nested runs, the MCP sessions of subagents, the semaphore
heartbeats and service handles, the metrics collector's and the replica budget's handles and the stores the runs page keeps open. One
object (``process_registry()``) instead of a module global per table, so the tables share
one lifetime, one lock discipline and one ``statistics()``.

Values of the tables that belong to ``actors`` are typed ``Any`` here: ``cluster`` never
imports ``actors``; the owning module declares the precise type where it reads the table.

Lock discipline: each ``Table`` has its own lock. A lock is held only for the table's dict
operations and, in ``get_or_create``, for the ``create`` callback (so two threads never
build two values for one key). ``create`` must not touch another table (no code path holds
two table locks, so there is no lock order to get wrong) and never calls back into its own
table. Nothing else runs under a table lock: no user code, no await.

Ray sessions: handles of a previous ``ray.init`` are useless, so tables created with
``per_session=True`` key every entry by the current session as well.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

import ray
from pydantic import BaseModel, ConfigDict

__all__ = ["ProcessRegistry", "Table", "WeakIdMap", "RegistryStatistics", "process_registry"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _session() -> str:
    return str(ray.get_runtime_context().gcs_address)


class Table(Generic[K, V]):
    """A keyed table of the registry, guarded by its own lock (see the module docstring)."""

    def __init__(self, name: str, *, per_session: bool) -> None:
        self.name = name
        self._per_session = per_session
        self._lock = threading.Lock()
        # key (prefixed by the Ray session when per_session) -> value; only touched under _lock.
        self._items: dict[Any, V] = {}

    def _key(self, key: K) -> Any:
        return (_session(), key) if self._per_session else key

    def get(self, key: K) -> V | None:
        full = self._key(key)
        with self._lock:
            return self._items.get(full)

    def get_or_create(self, key: K, create: Callable[[], V], *, alive: Callable[[V], bool] | None = None) -> V:
        """The value under ``key``; ``create()`` (under the lock) if there is none or ``alive`` says it is dead."""
        full = self._key(key)
        with self._lock:
            value = self._items.get(full)
            if value is None or (alive is not None and not alive(value)):
                value = create()
                self._items[full] = value
            return value

    def put(self, key: K, value: V) -> None:
        full = self._key(key)
        with self._lock:
            self._items[full] = value

    def discard(self, key: K, value: V | None = None) -> V | None:
        """Remove ``key`` (only if it still holds ``value``, when given); the removed value or None."""
        full = self._key(key)
        with self._lock:
            current = self._items.get(full)
            if current is None or (value is not None and current is not value):
                return None
            return self._items.pop(full)

    def select(self, keep: Callable[[K], bool]) -> list[V]:
        """The values whose key (without the session) satisfies ``keep``, any session."""
        with self._lock:
            items = list(self._items.items())
        return [v for k, v in items if keep(k[1] if self._per_session else k)]

    def pop_where(self, keep: Callable[[K], bool]) -> list[V]:
        """Remove and return the values whose key (without the session) satisfies ``keep``."""
        with self._lock:
            keys = [k for k in self._items if keep(k[1] if self._per_session else k)]
            return [self._items.pop(k) for k in keys]

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class WeakIdMap(Generic[V]):
    """Values keyed by an object's identity, dropped when the object is collected.

    For objects that may be unhashable (a caller with ``__eq__``) and must not be kept alive
    by the cache. Objects that cannot be weakly referenced are not cached (``get`` misses).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        # id(obj) -> (weak reference to obj, value); an entry is removed when obj is collected.
        self._items: dict[int, tuple[weakref.ref[Any], V]] = {}

    def get(self, obj: Any) -> V | None:
        with self._lock:
            entry = self._items.get(id(obj))
        if entry is None or entry[0]() is not obj:
            return None
        return entry[1]

    def put(self, obj: Any, value: V) -> None:
        ident = id(obj)
        try:
            ref = weakref.ref(obj, lambda _r: self._drop(ident))
        except TypeError:
            return  # not weakly referenceable: computed again next time, never kept alive
        with self._lock:
            self._items[ident] = (ref, value)

    def _drop(self, ident: int) -> None:
        with self._lock:
            entry = self._items.get(ident)
            if entry is not None and entry[0]() is None:
                del self._items[ident]

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class RegistryStatistics(BaseModel):
    """How many entries each table of this process's registry holds."""

    model_config = ConfigDict(frozen=True)

    tables: dict[str, int]


class ProcessRegistry:
    """This process's tables, one declared attribute each (the owning module in the comment)."""

    def __init__(self) -> None:
        # actors.handoffs: warm semaphore permits, per run's semaphore scope.
        self.warm_permits: Table[str, Any] = Table("handoffs.warm_permits", per_session=True)
        # actors.handoffs.pools: subagent pools by (pool key, skill), the runs following
        # their replicas, and the keys of callers without a ``pool_key``.
        self.subagent_pools: Table[tuple[str, str], Any] = Table("handoffs.subagent_pools", per_session=True)
        self.pool_trackers: Table[tuple[str, str], Any] = Table("handoffs.pool_trackers", per_session=False)
        self.caller_keys: WeakIdMap[str] = WeakIdMap("handoffs.caller_keys")
        # actors.callers: MCP sessions of this subagent, handles of nested runs.
        self.mcp_sessions: Table[tuple[int, str], Any] = Table("callers.mcp_sessions", per_session=False)
        self.nested_runs: Table[str, Any] = Table("callers.nested_runs", per_session=True)
        # cluster.semaphore: lease heartbeats by (service name, actor id), and the handles
        # of the semaphore service actors by name.
        self.semaphore_heartbeats: Table[tuple[str, str], Any] = Table("semaphore.heartbeats", per_session=False)
        self.semaphore_services: Table[str, Any] = Table("semaphore.services", per_session=True)
        # cluster.metrics: the collector actor's handle (one per Ray session).
        self.metrics_collector: Table[str, Any] = Table("metrics.collector", per_session=True)
        # The cluster-wide replica budget's actor handle (``cluster.replicas``).
        self.replica_budget: Table[str, Any] = Table("replicas.budget", per_session=True)
        # actors.orchestrator: the run hosts' actor handles, by host name, and the settings
        # every process of the cluster shares (``cluster.connect.shared_setting``), by key.
        self.run_hosts: Table[str, Any] = Table("orchestrator.run_hosts", per_session=True)
        self.shared_settings: Table[str, str] = Table("orchestrator.shared_settings", per_session=True)
        # cluster.cli.ui: one open store per path for the runs page's lifetime.
        self.ui_stores: Table[str, Any] = Table("ui.stores", per_session=False)

    def _tables(self) -> list[Table[Any, Any] | WeakIdMap[Any]]:
        return [t for t in vars(self).values() if isinstance(t, (Table, WeakIdMap))]

    def statistics(self) -> RegistryStatistics:
        return RegistryStatistics(tables={t.name: len(t) for t in sorted(self._tables(), key=lambda t: t.name)})


_REGISTRY = ProcessRegistry()


def process_registry() -> ProcessRegistry:
    """This process's registry (one per process, shared by every thread and event loop)."""
    return _REGISTRY
