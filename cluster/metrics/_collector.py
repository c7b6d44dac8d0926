"""The metrics collector: one named actor that sums what every soloist process records.

Processes never send single events here. Each keeps its own deltas (``MetricsDelta``) and
pushes them every second or so (see ``cluster.metrics.registry``); the collector merges them into
running totals, which the ``/metrics`` endpoint reads at scrape time. ``Aggregate`` is the
merge logic without Ray, so it is unit-tested directly.
"""

from __future__ import annotations

import time
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


#: The gauge every orchestrator sets as it starts and after each write: a value set after a
#: run was closed means the run was opened again (attached), and its series stay.
_STARTED = "soloist_state_version"


class Aggregate:
    """Running totals built from deltas. Not thread-safe: its owner serialises access.

    A closed run's series (``closed``) are dropped ``keep_s`` later, unless the run is opened
    again meanwhile: the totals hold the live runs' series and those of the runs closed lately.
    """

    def __init__(self) -> None:
        self.counters: dict[SeriesKey, float] = {}
        self.gauge_adds: dict[SeriesKey, float] = {}
        self.gauge_sets: dict[SeriesKey, tuple[float, float]] = {}
        self.histograms: dict[SeriesKey, tuple[list[int], float]] = {}
        # Closed runs whose series are still kept: orchestrator -> (when it closed, by the
        # closer's clock; when its series go). An entry leaves when its series go, or when the
        # run is opened again: its size is the runs closed lately.
        self._closed: dict[str, tuple[float, float]] = {}

    def closed(self, orchestrator: str, at: float, keep_s: float) -> None:
        """``orchestrator``'s run closed at ``at`` (Unix time): drop its series ``keep_s``
        seconds from now (pushes still under way, the final scrapes), unless a value of its
        state version set after ``at`` arrives first (it was opened again)."""
        self._closed[orchestrator] = (at, time.time() + max(0.0, keep_s))
        self.expire()

    def expire(self) -> int:
        """Drop the series of the closed runs whose keep has run out; returns how many series."""
        now = time.time()
        return sum(self.forget(o) for o in [o for o, (_at, until) in self._closed.items() if until <= now])

    def merge(self, delta: MetricsDelta) -> None:
        if self._closed:
            for (name, labels), (_value, at) in delta.gauge_sets.items():
                closed = self._closed.get(labels[0]) if name == _STARTED and labels else None
                if closed is not None and at > closed[0]:
                    del self._closed[labels[0]]  # set after its close: opened again
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
        self._closed.pop(orchestrator, None)
        dropped = 0
        for table in (self.counters, self.gauge_adds, self.gauge_sets, self.histograms):
            for key in [k for k in table if k[1][:1] == (orchestrator,)]:
                del table[key]
                dropped += 1
        return dropped

    def totals(self) -> MetricsDelta:
        self.expire()
        return MetricsDelta(
            counters=dict(self.counters),
            gauge_adds=dict(self.gauge_adds),
            gauge_sets=dict(self.gauge_sets),
            histograms={k: (tuple(c), s) for k, (c, s) in self.histograms.items()},
        )


class MetricsCollector:
    """The actor behind ``collector_handle()``: merges pushed deltas, reports totals, and
    drops the series of closed runs once their final values had time to be scraped."""

    def __init__(self) -> None:
        self._aggregate = Aggregate()
        self._pushes = 0  # deltas merged since the actor (re)started

    def push(self, delta: MetricsDelta) -> int:
        self._aggregate.merge(delta)
        self._aggregate.expire()
        self._pushes += 1
        return self._pushes

    def totals(self) -> MetricsDelta:
        return self._aggregate.totals()

    def forget(self, orchestrator: str) -> int:
        return self._aggregate.forget(orchestrator)

    def closed(self, orchestrator: str, at: float, keep_s: float) -> None:
        self._aggregate.closed(orchestrator, at, keep_s)


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
