"""The cluster-wide bounded semaphore: ``ClusterSemaphore`` (the facade), its leases and statistics.

Owns the lease table (``_lease_table``, pure), the detached actor that holds it (``_actor``)
and the per-process client with its heartbeat (``client``).
"""

from cluster.semaphore._lease_table import LeaseTable
from cluster.semaphore.client import (
    HARD_MAX_PERMITS,
    ClusterSemaphore,
    Lease,
    SemaphoreStatistics,
    held_by_this_process,
)

__all__ = ["ClusterSemaphore", "Lease", "SemaphoreStatistics", "HARD_MAX_PERMITS", "LeaseTable", "held_by_this_process"]
