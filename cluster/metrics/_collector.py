"""The metrics collector: one named actor that sums what every soloist process records.

Processes never send single events here. Each keeps its own deltas (``MetricsDelta``) and
pushes them every second or so (see ``cluster.metrics.registry``); the collector merges them into
running totals, which the ``/metrics`` endpoint reads at scrape time. ``Aggregate`` is the
merge logic without Ray, so it is unit-tested directly.
"""

from __future__ import annotations

from typing import Any

import ray
from pydantic import BaseModel, ConfigDict, Field

from cluster.connect import SOLOIST_NAMESPACE
from cluster.process import process_registry

__all__ = ["SeriesKey", "MetricsDelta", "Aggregate", "MetricsCollector", "collector_handle", "COLLECTOR_NAME"]

#: The collector's actor name in the ``soloist`` namespace (one per cluster).
COLLECTOR_NAME = "soloist:metrics"
#: Ray gives the head node this resource; the collector lives there, because worker nodes
#: come and go and the collector's totals would go with them.
_HEAD_RESOURCE = "node:__internal_head__"

#: ``(metric name, label values in the metric's label order)``.
SeriesKey = tuple[str, tuple[str, ...]]


class MetricsDelta(BaseModel):
    """Counts recorded since the last push (or, from the collector, the running totals).

    ``histograms`` maps a series to ``(per-bucket counts, sum)``: bucket ``i`` counts the
    observations in ``(bounds[i-1], bounds[i]]``, the last one those above every bound.
    ``gauge_sets`` maps a series to ``(value, unix time it was set)``: the newest wins.
    """

    model_config = ConfigDict(frozen=True)

    counters: dict[SeriesKey, float] = Field(default_factory=dict)
    gauge_adds: dict[SeriesKey, float] = Field(default_factory=dict)
    gauge_sets: dict[SeriesKey, tuple[float, float]] = Field(default_factory=dict)
    histograms: dict[SeriesKey, tuple[tuple[int, ...], float]] = Field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.counters or self.gauge_adds or self.gauge_sets or self.histograms)


class Aggregate:
    """Running totals built from deltas. Not thread-safe: its owner serialises access."""

    def __init__(self) -> None:
        self.counters: dict[SeriesKey, float] = {}
        self.gauge_adds: dict[SeriesKey, float] = {}
        self.gauge_sets: dict[SeriesKey, tuple[float, float]] = {}
        self.histograms: dict[SeriesKey, tuple[list[int], float]] = {}

    def merge(self, delta: MetricsDelta) -> None:
        for key, value in delta.counters.items():
            self.counters[key] = self.counters.get(key, 0.0) + value
        for key, value in delta.gauge_adds.items():
            self.gauge_adds[key] = self.gauge_adds.get(key, 0.0) + value
        for key, (value, at) in delta.gauge_sets.items():
            current = self.gauge_sets.get(key)
            if current is None or at >= current[1]:
                self.gauge_sets[key] = (value, at)
        for key, (buckets, total) in delta.histograms.items():
            mine = self.histograms.get(key)
            if mine is None:
                self.histograms[key] = (list(buckets), total)
                continue
            counts, seconds = mine
            if len(counts) != len(buckets):
                raise ValueError(f"histogram {key[0]} was pushed with {len(buckets)} buckets, the collector has {len(counts)}")
            for i, n in enumerate(buckets):
                counts[i] += n
            self.histograms[key] = (counts, seconds + total)

    def forget(self, orchestrator: str) -> int:
        """Drop every series of one orchestrator (label ``orchestrator`` comes first)."""
        dropped = 0
        for table in (self.counters, self.gauge_adds, self.gauge_sets, self.histograms):
            for key in [k for k in table if k[1][:1] == (orchestrator,)]:
                del table[key]
                dropped += 1
        return dropped

    def totals(self) -> MetricsDelta:
        return MetricsDelta(
            counters=dict(self.counters),
            gauge_adds=dict(self.gauge_adds),
            gauge_sets=dict(self.gauge_sets),
            histograms={k: (tuple(c), s) for k, (c, s) in self.histograms.items()},
        )


class MetricsCollector:
    """The actor behind ``collector_handle()``: merges pushed deltas, reports totals."""

    def __init__(self) -> None:
        self._aggregate = Aggregate()
        self._pushes = 0  # deltas merged since the actor (re)started

    def push(self, delta: MetricsDelta) -> int:
        self._aggregate.merge(delta)
        self._pushes += 1
        return self._pushes

    def totals(self) -> MetricsDelta:
        return self._aggregate.totals()

    def forget(self, orchestrator: str) -> int:
        return self._aggregate.forget(orchestrator)


_RemoteCollector = ray.remote(MetricsCollector)


def collector_handle() -> Any:
    """The cluster's collector actor, created on first use (detached, on the head node).

    Kept in the process registry per Ray session: a handle from an earlier ``ray.init`` is useless."""

    def create() -> Any:
        options: dict[str, Any] = dict(
            name=COLLECTOR_NAME,
            namespace=SOLOIST_NAMESPACE,
            get_if_exists=True,
            lifetime="detached",  # outlives the driver that happened to create it
            max_restarts=-1,  # a restart loses the totals; Prometheus rate() copes with resets
            num_cpus=0,
        )
        if _HEAD_RESOURCE in ray.cluster_resources():
            options["resources"] = {_HEAD_RESOURCE: 0.001}
        return _RemoteCollector.options(**options).remote()

    return process_registry().metrics_collector.get_or_create("collector", create)
