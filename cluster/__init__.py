"""Infrastructure that talks to the Ray cluster: connecting, the cluster-wide semaphore,
durable storage, metrics, logging and the per-process registry. Never imports ``actors``;
the ``soloist`` command (``cluster.cli``) is the one part on top of it."""

from coordinators.exceptions import SoloistError
from cluster.connect import SOLOIST_NAMESPACE, ClusterInfo, connect
from cluster.exceptions import (
    SemaphoreConfigConflict,
    SemaphoreTimeout,
    SemaphoreUnavailable,
)
from cluster.logs import JsonFormatter, configure_logging
from cluster.metrics import MetricsServer, serve_metrics
from cluster.process import ProcessRegistry, RegistryStatistics, process_registry
from cluster.replicas import ReplicaBudget, acquire_replica_place, live_replica_names, replica_budget, replicas_per_pool, set_replica_budget
from cluster.semaphore import ClusterSemaphore, Lease, SemaphoreStatistics

__all__ = [
    "connect",
    "SoloistError",
    "ClusterInfo",
    "ClusterSemaphore",
    "Lease",
    "SemaphoreStatistics",
    "SemaphoreTimeout",
    "SemaphoreUnavailable",
    "SemaphoreConfigConflict",
    "serve_metrics",
    "MetricsServer",
    "SOLOIST_NAMESPACE",
    "configure_logging",
    "JsonFormatter",
    "process_registry",
    "ProcessRegistry",
    "RegistryStatistics",
    "ReplicaBudget",
    "replica_budget",
    "set_replica_budget",
    "live_replica_names",
    "replicas_per_pool",
    "acquire_replica_place",
]
