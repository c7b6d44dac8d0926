"""Prometheus metrics: per-process recorders pushed to one collector actor, served from one endpoint.

Owns the metric names and recorders (``registry``) and the collector actor that sums every
process's deltas (``_collector``).
"""

from cluster.metrics._collector import Aggregate, MetricsDelta, collector_handle
from cluster.metrics.registry import (
    BUCKETS,
    METRICS,
    MetricSpec,
    MetricsServer,
    add_in_flight,
    add_replicas,
    disable,
    enable,
    enabled,
    families,
    flush,
    forget,
    handoffs_in_flight,
    read_totals,
    record_queue_wait,
    record_apply,
    record_handoff,
    record_semaphore_wait,
    record_snapshot,
    record_subagent_call,
    render,
    request_flush,
    serve_metrics,
    set_state_version,
)

__all__ = [
    "Aggregate",
    "MetricsDelta",
    "collector_handle",
    "METRICS",
    "MetricSpec",
    "BUCKETS",
    "serve_metrics",
    "MetricsServer",
    "flush",
    "enable",
    "disable",
    "enabled",
    "forget",
    "families",
    "render",
    "record_apply",
    "record_snapshot",
    "record_handoff",
    "record_semaphore_wait",
    "add_in_flight",
    "add_replicas",
    "record_queue_wait",
    "set_state_version",
    "record_subagent_call",
    "request_flush",
    "read_totals",
    "handoffs_in_flight",
]
