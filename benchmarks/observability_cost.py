"""(9) Issue 6: the cost of metrics and tracing on handoff throughput (on vs off).

No-op ``parallel_handoff`` batches at cap 4 with everything off (the baseline), metrics on,
tracing on, and both, interleaved round by round (in a rotating order) so drift hits every
variant alike; each figure is the median of per-round ratios to "off" in the same round,
with its spread: on a shared machine a cost smaller than the spread is not measurable here.
Metrics are switched in every process that records them on the handoff path: this one
(``cluster.metrics.enable/disable``) and each subagent replica of the ``noop`` pool (a
``noop`` handoff carrying the switch, one in flight per replica at once, so each replica
gets one: a pool sends concurrent calls to the replicas with the fewest in flight). Tracing "on"
is a second run on the same subagent pool with an OpenTelemetry SDK tracer (batch span
processor, in-memory exporter) set by ``set_tracer``; "off" is the API's default no-op tracer.
"""

from __future__ import annotations

import asyncio
from typing import Any

from actors import Call, Orchestrator, handoff, parallel_handoff
from benchmarks._harness import BenchContext, Counter, NoopIn, NoopOut, close_run, run_name, start_runs, timed
from benchmarks.results import Figure, MeasureResult

NAME = "observability_cost"
TITLE = "Metrics and tracing on vs off: no-op parallel_handoff throughput at cap 4"


def steps(ctx: BenchContext) -> int:
    return ctx.config.rounds + 1


def _sdk_tracer() -> tuple[Any, Any] | None:
    """An SDK tracer exporting to memory through a batch processor, and its provider."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        return None
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    return provider.get_tracer("soloist-bench"), provider


async def _set_metrics(metrics: Any, orch: Orchestrator[Any], replicas: int, on: bool) -> None:
    (metrics.enable if on else metrics.disable)()
    switch = Call("noop", NoopIn(metrics=on))
    await asyncio.gather(*[handoff(orch, switch, NoopOut) for _ in range(replicas)])


async def run(ctx: BenchContext) -> MeasureResult:
    try:
        from cluster import metrics
    except ImportError:
        metrics = None
    traced = _sdk_tracer()
    notes: list[str] = []
    if metrics is None:
        notes.append("cluster.metrics is not available: metrics figures skipped")
    if traced is None:
        notes.append("opentelemetry-sdk is not installed: tracing figures skipped")
    cfg = ctx.config
    n = cfg.observability_calls
    calls = [Call("noop")] * n
    # Two runs on the same subagent pool: set_tracer cannot be undone (None is a no-op).
    plain = await ctx.handoff_run()
    skills = ctx.skills
    (traced_run,) = await start_runs(lambda: Orchestrator(Counter(), caller=skills, name=run_name("obs-traced")))
    if traced is not None:
        traced_run.set_tracer(traced[0])
    variants: dict[str, tuple[bool, bool]] = {"off": (False, False)}
    if metrics is not None:
        variants["metrics on"] = (True, False)
    if traced is not None:
        variants["tracing on"] = (False, True)
    if metrics is not None and traced is not None:
        variants["metrics and tracing on"] = (True, True)
    seconds: dict[str, list[float]] = {variant: [] for variant in variants}
    was_on = metrics.enabled() if metrics is not None else False
    try:
        ctx.step("warming up")
        for orch in (plain, traced_run):
            await parallel_handoff(orch, calls[:8], NoopOut)
        order = list(variants)
        for round_ in range(cfg.rounds):
            ctx.step(f"round {round_ + 1} of {cfg.rounds}")
            shift = round_ % len(order)
            for variant in order[shift:] + order[:shift]:
                metrics_on, tracing_on = variants[variant]
                if metrics is not None:
                    await _set_metrics(metrics, plain, cfg.replicas, metrics_on)
                orch = traced_run if tracing_on else plain
                seconds[variant].append(await timed(lambda: parallel_handoff(orch, calls, NoopOut)))
    finally:
        if metrics is not None:
            await _set_metrics(metrics, plain, cfg.replicas, was_on)
        if traced is not None:
            traced[1].shutdown()
        await close_run(traced_run)
    base = [n / s for s in seconds["off"]]
    figures = [
        Figure(measure=NAME, name=f"handoff throughput, {variant}", values=[n / s for s in seconds[variant]], baselines=base,
               baseline_name="metrics and tracing off", unit="calls/s", better="higher", params={"calls": n, "cap": 4})
        for variant in variants if variant != "off"
    ]
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)
