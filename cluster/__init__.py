"""Everything about running on a Ray cluster: connecting, the cluster-wide semaphore,
durable storage, metrics and the ``soloist`` command."""

from cluster.connect import ClusterInfo, connect
from cluster.exceptions import SemaphoreConfigConflict, SemaphoreTimeout, SemaphoreUnavailable
from cluster.metrics import MetricsServer, serve_metrics
from cluster.semaphore import ClusterSemaphore, Lease, SemaphoreStatistics

__all__ = [
    "connect",
    "ClusterInfo",
    "ClusterSemaphore",
    "Lease",
    "SemaphoreStatistics",
    "SemaphoreTimeout",
    "SemaphoreUnavailable",
    "SemaphoreConfigConflict",
    "serve_metrics",
    "MetricsServer",
]
