"""Prometheus metrics: per-process recorders pushed to one collector actor, served from one endpoint.

Owns the metric names and recorders (``registry``) and the collector actor that sums every
process's deltas (``_collector``).
"""

from cluster.metrics.registry import (
    METRICS,
    MetricSpec,
    BUCKETS,
    serve_metrics,
    MetricsServer,
    flush,
    enable,
    disable,
    enabled,
    forget,
    families,
    render,
    record_apply,
    record_snapshot,
    record_handoff,
    record_semaphore_wait,
    add_in_flight,
    set_state_version,
    record_subagent_call,
    request_flush,
)

__all__ = [
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
    "set_state_version",
    "record_subagent_call",
    "request_flush",
]
