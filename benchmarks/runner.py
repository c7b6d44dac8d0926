"""Run the measures in order, each beside its baseline, and collect one ``BenchReport``.

Single-node measures share one Ray session (this process's, or a private local one the
runner starts and stops). Measures that need their own cluster (horizontal scaling over
nodes) run last, because they replace the session with a ``ray.cluster_utils.Cluster``.
A measure that fails is recorded with its error and logged; the others still run.
"""

from __future__ import annotations

import asyncio
import datetime
import gc
import logging
import os
import platform
import subprocess
import sys
from pathlib import Path
import time
from collections.abc import Sequence
from types import ModuleType

import ray

from benchmarks import (
    agents,
    apply_throughput,
    exploration_accuracy,
    handoff_overhead,
    many_runs,
    memory,
    multi_driver,
    observability_cost,
    parallel_efficiency,
    peer_langgraph,
    pool_scaling,
    recovery,
    scaling_nodes,
    scaling_runs,
    snapshot_latency,
    store_backends,
)
from benchmarks._harness import BenchContext, Progress, ensure_ray, load_average, ship_by_value
from benchmarks.config import BenchConfig
from benchmarks.results import BenchReport, MeasureResult

__all__ = ["MEASURES", "measure_names", "run_benchmarks", "run_benchmarks_async"]

_log = logging.getLogger("soloist.bench")
_LOG_EXTRA = {"component": "bench"}

#: Every measure, in run order. Each module has ``NAME``, ``TITLE``, ``steps(ctx)`` and
#: ``async run(ctx) -> MeasureResult``; ``scaling_nodes`` builds its own clusters, so it is last.
MEASURES: tuple[ModuleType, ...] = (
    apply_throughput,
    snapshot_latency,
    handoff_overhead,
    parallel_efficiency,
    peer_langgraph,
    memory,
    recovery,
    store_backends,
    agents,
    observability_cost,
    multi_driver,
    scaling_runs,
    exploration_accuracy,
    pool_scaling,
    many_runs,
    scaling_nodes,
)


def measure_names() -> list[str]:
    return [m.NAME for m in MEASURES]


def _select(only: Sequence[str] | None) -> list[ModuleType]:
    if not only:
        return list(MEASURES)
    unknown = sorted(set(only) - set(measure_names()))
    if unknown:
        raise ValueError(f"unknown measure(s) {', '.join(unknown)}; choose from {', '.join(measure_names())}")
    return [m for m in MEASURES if m.NAME in only]


async def _run_one(module: ModuleType, ctx: BenchContext) -> MeasureResult:
    ctx.measure = module.NAME
    ctx.progress.begin(module.NAME, module.TITLE, module.steps(ctx))
    # The driver's own full collections (70-90 ms here over Ray's, pydantic's and the measures'
    # objects) would land in whichever arm's round they happen to: collect now, and keep what
    # is alive out of later collections, so both arms run on the same small heap.
    gc.collect()
    gc.freeze()
    started = time.perf_counter()
    try:
        result: MeasureResult = await module.run(ctx)
    except Exception as exc:  # recorded in the report and logged with its traceback; the run goes on
        _log.exception("measure %s failed", module.NAME, extra=_LOG_EXTRA)
        result = MeasureResult(name=module.NAME, title=module.TITLE, error=f"{type(exc).__name__}: {exc}")
    finally:
        ctx.progress.end(module.NAME)
    return result.model_copy(update={"seconds": time.perf_counter() - started, "load_average": load_average()})


def source_commit() -> str:
    """``git describe --always --dirty`` of the checkout the benchmarks run from, or ``unknown``."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


async def run_benchmarks_async(
    config: BenchConfig, *, only: Sequence[str] | None = None, progress: Progress | None = None
) -> BenchReport:
    """Run the selected measures (all by default) and return the report.

    Connects to Ray only if this process is not connected yet (a private local instance,
    stopped at the end); a caller that is connected keeps its session for the single-node
    measures. The scaling measure always replaces it with its own clusters.
    """
    modules = _select(only)
    ship_by_value()
    ctx = BenchContext(config=config) if progress is None else BenchContext(config=config, progress=progress)
    started_at = datetime.datetime.now(datetime.timezone.utc)
    load_at_start = load_average()
    commit = source_commit()  # before anything runs: the code measured, not a later checkout
    started = time.perf_counter()
    results: list[MeasureResult] = []
    started_ray = False
    try:
        for module in modules:
            if getattr(module, "OWN_CLUSTER", False):
                results.append(await _run_one(module, ctx))
                continue
            started_ray = ensure_ray() or started_ray
            results.append(await _run_one(module, ctx))
    finally:
        if ray.is_initialized():
            try:
                await ctx.close_handoff_run()
            except Exception:  # logged; Ray is stopped below either way
                _log.exception("closing the shared handoff run failed", extra=_LOG_EXTRA)
        if started_ray and ray.is_initialized():
            ray.shutdown()
    return BenchReport(
        mode=config.mode,
        started_at=started_at.isoformat(timespec="seconds"),
        commit=commit,
        load_average=load_at_start,
        seconds=time.perf_counter() - started,
        cores=os.cpu_count() or 1,
        python=sys.version.split()[0],
        ray_version=ray.__version__,
        platform=platform.platform(),
        measures=results,
    )


def run_benchmarks(config: BenchConfig, *, only: Sequence[str] | None = None, progress: Progress | None = None) -> BenchReport:
    """``run_benchmarks_async`` in a fresh event loop (for the command line)."""
    return asyncio.run(run_benchmarks_async(config, only=only, progress=progress))
