"""(6a) Horizontal scaling over concurrent runs: 1, 2, 4 and 8 runs, each with its own cap of 4.

Every run is its own orchestrator (its own cluster-wide semaphore of four permits) and hands
off ``scaling_calls_per_run`` sleeping calls in one ``parallel_handoff``; all runs go at
once from this process over one shared subagent pool. The figure is aggregate handoffs per
second against one run alone, measured in the same session; the ideal ratio is the number of
runs, and the note says where the aggregate falls under 80% of that (saturates).
"""

from __future__ import annotations

import asyncio

from actors import Call, Orchestrator, parallel_handoff
from benchmarks._harness import BenchContext, Counter, SleepIn, SleepOut, close_run, run_name, start_runs, timed
from benchmarks.results import Figure, MeasureResult

NAME = "scaling_runs"
TITLE = "Concurrent runs (each its own orchestrator and cap of 4): aggregate handoffs/s vs one run"
SATURATED_BELOW = 0.8  # a level whose aggregate is under 80% of ideal (runs x one run) is saturated


def steps(ctx: BenchContext) -> int:
    return ctx.config.scaling_rounds + 1


async def aggregate_rate(runs: list[Orchestrator[Counter]], calls_per_run: int, sleep_s: float) -> float:
    """Aggregate handoffs/s of every run handing off at once (one round)."""
    calls = [Call("sleep", SleepIn(seconds=sleep_s))] * calls_per_run

    async def once() -> None:
        batches = await asyncio.gather(*[parallel_handoff(o, calls, SleepOut) for o in runs])
        failed = [r.error for b in batches for r in b if r.error is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} handoffs failed, first: {failed[0]!r}")

    return len(runs) * calls_per_run / await timed(once)


def saturation_note(levels: list[int], rates: list[float], ideals: list[float], what: str) -> str:
    """Where the aggregate first falls under ``SATURATED_BELOW`` of its ideal, and the peak."""
    peak_level, peak_rate = max(zip(levels, rates), key=lambda lr: lr[1])
    shares = ", ".join(f"{level} {what}: {rate / ideal:.0%}" for level, rate, ideal in zip(levels, rates, ideals))
    for level, rate, ideal in zip(levels, rates, ideals):
        if rate < SATURATED_BELOW * ideal:
            return f"saturates at {level} {what}; peak {peak_rate:,.0f} handoffs/s at {peak_level} {what} (share of ideal: {shares})"
    return f"no saturation up to {levels[-1]} {what}; peak {peak_rate:,.0f} handoffs/s (share of ideal: {shares})"


async def run(ctx: BenchContext) -> MeasureResult:
    cfg = ctx.config
    levels = sorted(cfg.scaling_runs)
    ctx.step(f"starting {levels[-1]} orchestrators")
    skills = ctx.skills
    # The first run is the bench's shared one; the others are started side by side.
    runs = [await ctx.handoff_run(), *await start_runs(
        *[lambda i=i: Orchestrator(Counter(), caller=skills, name=run_name(f"scale{i}")) for i in range(1, levels[-1])])]
    rounds: dict[int, list[float]] = {level: [] for level in levels}
    try:
        await asyncio.gather(*[parallel_handoff(o, [Call("sleep", SleepIn(seconds=0))] * 4, SleepOut) for o in runs])
        for r in range(cfg.scaling_rounds):
            ctx.step(f"round {r + 1} of {cfg.scaling_rounds}: every level")
            for level in (levels if r % 2 == 0 else levels[::-1]):
                rounds[level].append(await aggregate_rate(runs[:level], cfg.scaling_calls_per_run, cfg.scaling_sleep_s))
    finally:
        for o in runs[1:]:
            await close_run(o)
    params = {"calls_per_run": cfg.scaling_calls_per_run, "sleep_s": cfg.scaling_sleep_s, "cap_per_run": 4}
    figures = [
        Figure(measure=NAME, name=f"{level} concurrent run(s)", values=rounds[level], baselines=rounds[levels[0]],
               baseline_name=f"{levels[0]} run(s), same rounds", unit="handoffs/s", better="higher",
               params={**params, "runs": level, "ideal_ratio": level / levels[0]})
        for level in levels
    ]
    rates = [f.value for f in figures]
    # Ideal: every level as fast per run as the first one (linear in the number of runs).
    ideals = [rates[0] * level / levels[0] for level in levels]
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=[saturation_note(levels, rates, ideals, "runs")])
