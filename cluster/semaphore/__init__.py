"""The cluster-wide bounded semaphore: ``ClusterSemaphore`` (the facade), its leases and statistics.

Owns the lease table (``_lease_table``, pure), one scope inside a service (``_scope``), the
detached service actors that hold the tables of many scopes (``_service``) and which of
them holds a scope (``_placement``), the per-process heartbeat (``_heartbeat``) and the
facade (``client``).
"""

from cluster.semaphore._heartbeat import renew_held_leases
from cluster.semaphore._lease_table import LeaseTable
from cluster.semaphore._placement import SERVICE_COUNT
from cluster.semaphore.client import (
    HARD_MAX_PERMITS,
    ClusterSemaphore,
    Lease,
    SemaphoreStatistics,
    ServiceStatistics,
    held_by_this_process,
)

__all__ = [
    "ClusterSemaphore", "Lease", "SemaphoreStatistics", "ServiceStatistics", "HARD_MAX_PERMITS", "SERVICE_COUNT",
    "LeaseTable", "held_by_this_process", "renew_held_leases",
]
