"""The cluster-wide bounded semaphore: ``ClusterSemaphore`` (the facade), its leases and statistics.

Owns the lease table (``_lease_table``, pure), a scope's budget window (``_budget``, pure;
its durable copy in ``_budget_records``), model endpoints as shared scopes and the usage
their calls report (``_usage``), one scope inside a service (``_scope``), the
detached service actors that hold the tables of many scopes (``_service``) and which of
them holds a scope (``_placement``), the per-process heartbeat (``_heartbeat``) and the
facade (``client``).
"""

from cluster.semaphore._budget import Budget, BudgetConfigError, BudgetStatistics, BudgetWindow, budget_of
from cluster.semaphore._heartbeat import renew_held_leases
from cluster.semaphore._lease_table import LeaseTable
from cluster.semaphore._placement import SERVICE_COUNT
from cluster.semaphore._usage import (
    ModelCall,
    ModelEndpoint,
    TokenUsage,
    UsageMeter,
    current_meter,
    endpoint_scope,
    metered,
    report_usage,
)
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
    "Budget", "BudgetConfigError", "BudgetStatistics", "BudgetWindow", "budget_of",
    "ModelEndpoint", "ModelCall", "TokenUsage", "UsageMeter", "endpoint_scope", "report_usage", "metered",
    "current_meter",
]
