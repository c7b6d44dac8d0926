"""Prometheus metrics: recorded where the work happens, served from one ``/metrics`` endpoint.

Where they are recorded: the orchestrator actor (applies, state version), every process that
hands off (handoffs, latency, in flight, semaphore wait, snapshot round trips) and the
subagent actors on whatever node they run (``soloist_subagent_calls_total``, by node).

Why a collector actor and not Ray's own pipeline (``ray.util.metrics``): Ray exports
application metrics through the metrics agent of *each node*, so a run spread over three
nodes shows up on three endpoints, renamed with a ``ray_`` prefix, and only once the
agent's report loop has run; the agent also needs the dashboard components, which soloist's
embedded Ray (and the test suite) leaves off. The issue asks for the fixed names on *one*
endpoint. So each process keeps prometheus-style counters, histograms and gauges locally
(a dict update under a lock: no remote call per event) and pushes the deltas to one named
actor, ``soloist:metrics`` in the ``soloist`` namespace, from a background thread once per
``SOLOIST_METRICS_FLUSH_S`` seconds (default 1) and when a parallel handoff batch ends. The
endpoint (``serve_metrics``) flushes its own process, reads the collector's totals and
renders them with ``prometheus_client``. ``flush()`` pushes this process's deltas now.

Switch: ``SOLOIST_METRICS=0`` in the environment (set it before Ray starts, or pass it in
``runtime_env={"env_vars": ...}``, so every worker sees it) or ``disable()`` in one process.
"""

from __future__ import annotations

import atexit
import bisect
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import ray
from pydantic import BaseModel, ConfigDict
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest

from cluster.connect import wait_ref
from cluster.replicas import replicas_per_pool
from cluster.metrics._collector import (
    Aggregate,
    MetricsDelta,
    SeriesKey,
    collector_handle,
)

__all__ = [
    "METRICS", "MetricSpec", "BUCKETS", "serve_metrics", "MetricsServer", "flush", "enable", "disable", "enabled",
    "forget", "run_closed", "KEEP_CLOSED_S", "families", "render", "record_apply", "record_snapshot", "record_handoff", "record_semaphore_wait",
    "add_in_flight", "set_state_version", "record_subagent_call", "record_queue_wait", "add_replicas", "request_flush", "read_totals", "handoffs_in_flight",
    "record_llm_request", "record_budget_wait", "record_run_tokens", "TokenTotals", "llm_token_totals", "run_token_totals",
]

_log = logging.getLogger(__name__)
_LOG_EXTRA = {"component": "metrics"}

MetricKind = Literal["counter", "histogram", "gauge_add", "gauge_set"]


class MetricSpec:
    """One metric: its kind, label names (``orchestrator`` first) and help text."""

    __slots__ = ("kind", "labels", "help")

    def __init__(self, kind: MetricKind, labels: tuple[str, ...], help: str) -> None:
        self.kind, self.labels, self.help = kind, labels, help


#: Every metric soloist exports. Names are fixed by the design contract.
METRICS: dict[str, MetricSpec] = {
    "soloist_apply_total": MetricSpec("counter", ("orchestrator", "outcome"), "Writes handled by the orchestrator actor, by outcome (ok, conflict, refused, error)."),
    "soloist_apply_seconds": MetricSpec("histogram", ("orchestrator",), "Time the orchestrator actor spent on a write, lock wait and journal fsync included."),
    "soloist_snapshot_seconds": MetricSpec("histogram", ("orchestrator",), "Round trip of snapshot() as seen by the caller, deserialisation included."),
    "soloist_handoff_total": MetricSpec("counter", ("orchestrator", "skill", "outcome"), "Handoffs finished, by skill and outcome (ok, error, timeout, cancelled)."),
    "soloist_handoff_seconds": MetricSpec("histogram", ("orchestrator", "skill"), "Handoff latency seen by the caller: permit wait, subagent call and decoding."),
    "soloist_handoffs_in_flight": MetricSpec("gauge_add", ("orchestrator",), "Handoffs holding a permit right now, summed over every calling process."),
    "soloist_semaphore_wait_seconds": MetricSpec("histogram", ("orchestrator",), "Time a handoff waited for a permit of the cluster-wide semaphore."),
    "soloist_state_version": MetricSpec("gauge_set", ("orchestrator",), "The orchestrator's last committed state version."),
    "soloist_subagent_calls_total": MetricSpec("counter", ("orchestrator", "skill", "node", "outcome"), "Tool calls served by subagent actors, by the node they ran on and outcome (ok, tool_error, error, cancelled)."),
    # Per pool (a caller's pool key and a skill), not per run: a pool serves many runs.
    "soloist_subagent_queue_wait_seconds": MetricSpec("histogram", ("pool", "skill"), "Time a subagent call waited before its body started: for a replica to be up, in its lane and for its permit."),
    "soloist_subagent_replicas": MetricSpec("gauge_add", ("pool", "skill"), "Subagent replicas up now, counted in Ray's actor table at scrape time (0 for a pool whose replicas all retired)."),
    # Model calls, per model across every run (recorded where the call is made, from the usage the response reported).
    "soloist_llm_tokens_total": MetricSpec("counter", ("model", "kind"), "Tokens used by model calls, by model and kind (input, output), as the responses reported them."),
    "soloist_llm_requests_total": MetricSpec("counter", ("model", "outcome"), "Model requests made, by model and outcome (ok, error)."),
    "soloist_budget_wait_seconds": MetricSpec("histogram", ("scope",), "Time a grant of a budgeted semaphore scope was held back by its requests/tokens-per-window budget."),
    # Per run and agent (the skill that made the model calls), recorded by the process that handed off.
    "soloist_run_tokens_total": MetricSpec("counter", ("orchestrator", "skill", "kind"), "Tokens used by the model calls of a run's handoffs, by skill (the agent) and kind (input, output)."),
}

#: Histogram upper bounds in seconds (``+Inf`` is implied).
BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def _env_on(name: str, default: str) -> bool:
    return os.environ.get(name, default).strip().lower() not in ("0", "false", "off", "no")


class _Recorder:
    """This process's deltas since the last push, and the thread that pushes them."""

    def __init__(self) -> None:
        self.enabled = _env_on("SOLOIST_METRICS", "1")
        self._interval = float(os.environ.get("SOLOIST_METRICS_FLUSH_S", "1.0"))
        self._lock = threading.Lock()  # guards the four pending tables
        self._flush_lock = threading.Lock()  # one push at a time, so gauge sets stay ordered
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._reset()

    def _reset(self) -> None:
        self.counters: dict[SeriesKey, float] = {}
        self.gauge_adds: dict[SeriesKey, float] = {}
        self.gauge_sets: dict[SeriesKey, tuple[float, float]] = {}
        self.histograms: dict[SeriesKey, tuple[list[int], float]] = {}

    # The hot path: one lock, one dict update.
    def inc(self, key: SeriesKey, value: float = 1.0) -> None:
        with self._lock:
            self.counters[key] = self.counters.get(key, 0.0) + value
        self._ensure_thread()

    def add(self, key: SeriesKey, value: float) -> None:
        with self._lock:
            self.gauge_adds[key] = self.gauge_adds.get(key, 0.0) + value
        self._ensure_thread()

    def set(self, key: SeriesKey, value: float) -> None:
        with self._lock:
            self.gauge_sets[key] = (value, time.time())
        self._ensure_thread()

    def observe(self, key: SeriesKey, seconds: float) -> None:
        index = bisect.bisect_left(BUCKETS, seconds)
        with self._lock:
            entry = self.histograms.get(key)
            if entry is None:
                entry = self.histograms[key] = ([0] * (len(BUCKETS) + 1), 0.0)
            entry[0][index] += 1
            self.histograms[key] = (entry[0], entry[1] + seconds)
        self._ensure_thread()

    def take(self) -> MetricsDelta:
        """Everything pending, handed over; the tables start empty again."""
        with self._lock:
            delta = MetricsDelta(
                counters=self.counters, gauge_adds=self.gauge_adds, gauge_sets=self.gauge_sets,
                histograms={k: (tuple(c), s) for k, (c, s) in self.histograms.items()},
            )
            self._reset()
        return delta

    def give_back(self, delta: MetricsDelta) -> None:
        """Re-queue a delta whose push failed, merged with whatever arrived meanwhile."""
        merged = Aggregate()
        merged.merge(delta)
        merged.merge(self.take())
        with self._lock:
            for key, value in merged.counters.items():
                self.counters[key] = self.counters.get(key, 0.0) + value
            for key, value in merged.gauge_adds.items():
                self.gauge_adds[key] = self.gauge_adds.get(key, 0.0) + value
            for key, stamped in merged.gauge_sets.items():
                if key not in self.gauge_sets or stamped[1] >= self.gauge_sets[key][1]:
                    self.gauge_sets[key] = stamped
            for key, (counts, seconds) in merged.histograms.items():
                mine = self.histograms.get(key)
                if mine is None:
                    self.histograms[key] = (list(counts), seconds)
                else:
                    self.histograms[key] = ([a + b for a, b in zip(mine[0], counts)], mine[1] + seconds)

    def flush(self, timeout: float) -> bool:
        """Push pending deltas to the collector and wait; False when Ray is not connected."""
        with self._flush_lock:
            delta = self.take()
            if delta.is_empty():
                return True
            if not ray.is_initialized():
                self.give_back(delta)
                return False
            try:
                # Not ray.get: this runs on background threads of async actors too, where
                # ray.get would warn about blocking an event loop it does not block.
                wait_ref(collector_handle().push.remote(delta), timeout=timeout)
            except BaseException:
                self.give_back(delta)
                raise
            return True

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="soloist-metrics-flush", daemon=True)
                self._thread.start()
                # Registered now (after ray.init, normally), so it runs before Ray's own shutdown hook.
                atexit.register(_at_exit)

    def _run(self) -> None:
        failing = False
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            try:
                self.flush(timeout=30.0)
            except Exception as exc:  # kept and retried on the next tick; say so once per outage
                if not failing:
                    _log.warning("pushing metrics to the collector failed (%s: %s); will retry", type(exc).__name__, exc, extra=_LOG_EXTRA)
                failing = True
            else:
                failing = False


_recorder = _Recorder()


def _at_exit() -> None:
    if _recorder.enabled and ray.is_initialized():
        try:
            _recorder.flush(timeout=5.0)
        except Exception as exc:  # the process is ending: report, do not raise from atexit
            _log.warning("final metrics push failed: %s: %s", type(exc).__name__, exc, extra=_LOG_EXTRA)



# ------------------------------------------------------------------ switches and flushing


def enabled() -> bool:
    """Whether this process records metrics (``SOLOIST_METRICS=0`` or ``disable()`` turn it off)."""
    return _recorder.enabled


def disable() -> None:
    """Stop recording in this process and drop what was not pushed yet."""
    _recorder.enabled = False
    _recorder.take()


def enable() -> None:
    """Record again in this process."""
    _recorder.enabled = True


def flush(timeout: float = 30.0) -> bool:
    """Push this process's pending metrics to the collector now and wait for it.

    Returns False (keeping them) when Ray is not connected. Other processes push on their
    own timer; a test waits for their counts to reach the collector.
    """
    return _recorder.flush(timeout)


def request_flush() -> None:
    """Ask the background thread to push soon (free to call on an event loop)."""
    if _recorder.enabled and _recorder._thread is not None:
        _recorder._wake.set()


def forget(orchestrator: str) -> int:
    """Drop every series of ``orchestrator`` from the collector (a finished run); returns how many."""
    return int(wait_ref(collector_handle().forget.remote(orchestrator), timeout=30))


#: How long a closed run's series stay on the endpoint (``SOLOIST_METRICS_KEEP_CLOSED_S``):
#: long enough for the pushes still under way and for Prometheus to scrape their final values.
KEEP_CLOSED_S = 300.0


def run_closed(orchestrator: str) -> None:
    """``orchestrator``'s run was closed: the collector drops its series after
    ``SOLOIST_METRICS_KEEP_CLOSED_S`` seconds (default ``KEEP_CLOSED_S``), unless it is opened
    again meanwhile. Without it every run ever opened kept its series until the cluster ended.
    Sends and returns at once (callable on an event loop); nothing to do without Ray."""
    if not _recorder.enabled or not ray.is_initialized():
        return
    keep = float(os.environ.get("SOLOIST_METRICS_KEEP_CLOSED_S", KEEP_CLOSED_S))
    try:
        collector_handle().closed.remote(orchestrator, time.time(), keep)
    except Exception as exc:  # the series stay; closing the run must not fail for it
        _log.warning("could not tell the metrics collector that %r closed: %s", orchestrator, exc, extra=_LOG_EXTRA)


# ------------------------------------------------------------------ what the runtime records


def record_apply(orchestrator: str, seconds: float, outcome: str) -> None:
    if _recorder.enabled:
        _recorder.inc(("soloist_apply_total", (orchestrator, outcome)))
        _recorder.observe(("soloist_apply_seconds", (orchestrator,)), seconds)


def record_snapshot(orchestrator: str, seconds: float) -> None:
    if _recorder.enabled:
        _recorder.observe(("soloist_snapshot_seconds", (orchestrator,)), seconds)


def record_handoff(orchestrator: str, skill: str, outcome: str, seconds: float) -> None:
    if _recorder.enabled:
        _recorder.inc(("soloist_handoff_total", (orchestrator, skill, outcome)))
        _recorder.observe(("soloist_handoff_seconds", (orchestrator, skill)), seconds)


def record_semaphore_wait(orchestrator: str, seconds: float) -> None:
    if _recorder.enabled:
        _recorder.observe(("soloist_semaphore_wait_seconds", (orchestrator,)), seconds)


def add_in_flight(orchestrator: str, delta: int) -> None:
    if _recorder.enabled:
        _recorder.add(("soloist_handoffs_in_flight", (orchestrator,)), float(delta))


def set_state_version(orchestrator: str, version: int) -> None:
    if _recorder.enabled:
        _recorder.set(("soloist_state_version", (orchestrator,)), float(version))


def record_subagent_call(orchestrator: str, skill: str, node: str, outcome: str) -> None:
    if _recorder.enabled:
        _recorder.inc(("soloist_subagent_calls_total", (orchestrator, skill, node, outcome)))


def record_queue_wait(pool: str, skill: str, seconds: float) -> None:
    if _recorder.enabled:
        _recorder.observe(("soloist_subagent_queue_wait_seconds", (pool, skill)), seconds)


def add_replicas(pool: str, skill: str, delta: int) -> None:
    if _recorder.enabled:
        _recorder.add(("soloist_subagent_replicas", (pool, skill)), float(delta))


def record_llm_request(model: str, outcome: str, input_tokens: int = 0, output_tokens: int = 0) -> None:
    """One model request (``outcome``: ok or error) and the tokens its response reported."""
    if _recorder.enabled:
        _recorder.inc(("soloist_llm_requests_total", (model, outcome)))
        if input_tokens:
            _recorder.inc(("soloist_llm_tokens_total", (model, "input")), float(input_tokens))
        if output_tokens:
            _recorder.inc(("soloist_llm_tokens_total", (model, "output")), float(output_tokens))


def record_budget_wait(scope: str, seconds: float) -> None:
    """A grant of a budgeted scope was held back by its budget for ``seconds`` (0 when it was not)."""
    if _recorder.enabled:
        _recorder.observe(("soloist_budget_wait_seconds", (scope,)), seconds)


def record_run_tokens(orchestrator: str, skill: str, input_tokens: int, output_tokens: int) -> None:
    """The tokens the model calls of one of ``orchestrator``'s handoffs (to ``skill``) used."""
    if _recorder.enabled:
        if input_tokens:
            _recorder.inc(("soloist_run_tokens_total", (orchestrator, skill, "input")), float(input_tokens))
        if output_tokens:
            _recorder.inc(("soloist_run_tokens_total", (orchestrator, skill, "output")), float(output_tokens))


class TokenTotals(BaseModel):
    """Tokens used, by kind, as the metrics count them."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def _add(found: dict[Any, TokenTotals], key: Any, kind: str, value: float) -> None:
    now = found.get(key, TokenTotals())
    field = "input_tokens" if kind == "input" else "output_tokens"
    found[key] = now.model_copy(update={field: getattr(now, field) + int(value)})


def llm_token_totals(totals: MetricsDelta) -> dict[str, TokenTotals]:
    """``soloist_llm_tokens_total`` in ``totals``, by model."""
    found: dict[Any, TokenTotals] = {}
    for (name, labels), value in totals.counters.items():
        if name == "soloist_llm_tokens_total":
            _add(found, labels[0], labels[1], value)
    return found


def run_token_totals(totals: MetricsDelta) -> dict[tuple[str, str], TokenTotals]:
    """``soloist_run_tokens_total`` in ``totals``, by (run, skill)."""
    found: dict[Any, TokenTotals] = {}
    for (name, labels), value in totals.counters.items():
        if name == "soloist_run_tokens_total":
            _add(found, (labels[0], labels[1]), labels[2], value)
    return found


# ------------------------------------------------------------------ exposition


def families(totals: MetricsDelta) -> list[Metric]:
    """Prometheus metric families for every soloist metric (empty ones included)."""
    out: dict[str, Metric] = {}
    for name, spec in METRICS.items():
        if spec.kind == "counter":
            out[name] = CounterMetricFamily(name, spec.help, labels=spec.labels)
        elif spec.kind == "histogram":
            out[name] = HistogramMetricFamily(name, spec.help, labels=spec.labels)
        else:
            out[name] = GaugeMetricFamily(name, spec.help, labels=spec.labels)
    for (name, labels), value in sorted(totals.counters.items()):
        if name in out:
            out[name].add_metric(list(labels), value)  # type: ignore[attr-defined]
    for (name, labels), value in sorted(totals.gauge_adds.items()):
        if name in out:
            out[name].add_metric(list(labels), value)  # type: ignore[attr-defined]
    for (name, labels), (value, _at) in sorted(totals.gauge_sets.items()):
        if name in out:
            out[name].add_metric(list(labels), value)  # type: ignore[attr-defined]
    for (name, labels), (counts, seconds) in sorted(totals.histograms.items()):
        if name in out:
            out[name].add_metric(list(labels), _cumulative(counts), seconds)  # type: ignore[attr-defined]
    return list(out.values())


def _cumulative(counts: Iterable[int]) -> list[tuple[str, float]]:
    bounds = [repr(float(b)) for b in BUCKETS] + ["+Inf"]
    buckets, running = [], 0
    for bound, n in zip(bounds, counts):
        running += n
        buckets.append((bound, float(running)))
    return buckets


class _Static:
    def __init__(self, totals: MetricsDelta) -> None:
        self._totals = totals

    def collect(self) -> Iterator[Metric]:
        yield from families(self._totals)


def render(totals: MetricsDelta) -> str:
    """``totals`` in the Prometheus text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Static(totals))
    return generate_latest(registry).decode()


def read_totals(timeout: float = 10.0) -> MetricsDelta:
    """The cluster-wide totals, as one scrape of ``/metrics`` would see them (blocking).

    Pushes this process's pending counts first, so what it just recorded is included.
    """
    if not ray.is_initialized():
        raise RuntimeError("cannot read soloist metrics: this process is not connected to Ray; call cluster.connect() first")
    if _recorder.enabled:
        _recorder.flush(timeout=timeout)
    totals: MetricsDelta = wait_ref(collector_handle().totals.remote(), timeout=timeout)
    return _with_replica_counts(totals)


def _with_replica_counts(totals: MetricsDelta) -> MetricsDelta:
    """``totals`` with ``soloist_subagent_replicas`` read from Ray's actor table: the replicas'
    own +1 at start and -1 at retirement name the pools (so one that shrank to zero shows 0),
    but a replica killed for good never says -1."""
    name = "soloist_subagent_replicas"
    counts = replicas_per_pool()
    gauges = {key: value for key, value in totals.gauge_adds.items() if key[0] != name}
    for key in totals.gauge_adds:
        if key[0] == name:
            gauges[key] = 0.0
    for pool, count in counts.items():
        gauges[(name, pool)] = float(count)
    return totals.model_copy(update={"gauge_adds": gauges})


def handoffs_in_flight(totals: MetricsDelta, orchestrator: str) -> int:
    """The ``soloist_handoffs_in_flight`` gauge of one orchestrator in ``totals``."""
    return int(totals.gauge_adds.get(("soloist_handoffs_in_flight", (orchestrator,)), 0.0))


class _ClusterBridge:
    """A prometheus_client collector that reads the cluster-wide totals at scrape time."""

    def collect(self) -> Iterator[Metric]:
        yield from families(read_totals())


class MetricsServer:
    """A running ``/metrics`` endpoint; ``close()`` (or ``with``) stops it."""

    def __init__(self, httpd: Any, thread: threading.Thread, addr: str) -> None:
        self._httpd = httpd
        self._thread = thread
        self.addr = addr
        self.port: int = int(httpd.server_port)  # the real port (also when 0 was asked for)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.addr in ("0.0.0.0", "") else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> "MetricsServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<MetricsServer {self.url}>"


def serve_metrics(port: int, addr: str = "0.0.0.0") -> MetricsServer:
    """Serve every soloist metric of the connected cluster on ``http://addr:port/metrics``.

    ``port=0`` picks a free port (see ``MetricsServer.port``). Each scrape reads the
    collector's totals, so one endpoint covers every process and node of the cluster.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"serve_metrics(port=...) takes a port number 0-65535 (0: any free port), got {port!r}")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ClusterBridge())
    httpd, thread = start_http_server(port, addr=addr, registry=registry)
    server = MetricsServer(httpd, thread, addr)
    _log.info("serving metrics on %s", server.url, extra=_LOG_EXTRA)
    return server
