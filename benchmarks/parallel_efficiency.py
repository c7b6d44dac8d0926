"""(4) Parallel efficiency: 40 skills that each sleep 100 ms, at cap 4 (ideal: 1.0 s).

Wall time of one ``parallel_handoff`` against the ideal ``calls / cap * sleep``; the same
fan-out in raw Ray (``asyncio.Semaphore(4)`` over four raw subagents) is measured beside
it, so what the runtime adds is separated from what Ray itself costs.
"""

from __future__ import annotations

import asyncio

from actors import Call, Orchestrator, parallel_handoff
from benchmarks._harness import BenchContext, Counter, SleepIn, SleepOut, best, close_run, run_name
from benchmarks.handoff_overhead import raw_fanout
from benchmarks.results import Figure, MeasureResult

NAME = "parallel_efficiency"
TITLE = "Parallel efficiency: sleeping skills at cap 4, wall time vs ideal"
EFFICIENCY_TARGET = 0.95  # the bar: at least 95% of ideal
CAP = 4


def steps(ctx: BenchContext) -> int:
    return 2


def ideal_seconds(calls: int, sleep_s: float, cap: int = CAP) -> float:
    """Wall time of ``calls`` sleeps at ``cap`` in flight with zero overhead."""
    return -(-calls // cap) * sleep_s


async def soloist_fanout(ctx: BenchContext, repeats: int) -> float:
    """Best wall time of the configured fan-out through ``parallel_handoff``."""
    cfg = ctx.config
    orch = Orchestrator(Counter(), caller=ctx.skills, name=run_name("fanout"))
    calls = [Call("sleep", SleepIn(seconds=cfg.fanout_sleep_s))] * cfg.fanout_calls
    try:
        await parallel_handoff(orch, calls[:CAP], SleepOut)  # warm: pool and semaphore exist

        async def once() -> None:
            results = await parallel_handoff(orch, calls, SleepOut)
            failed = [r.error for r in results if r.error is not None]
            if failed:
                raise RuntimeError(f"{len(failed)} fan-out handoffs failed, first: {failed[0]!r}")

        return await best(once, repeats)
    finally:
        await close_run(orch)


async def run(ctx: BenchContext) -> MeasureResult:
    cfg = ctx.config
    ideal = ideal_seconds(cfg.fanout_calls, cfg.fanout_sleep_s)
    ctx.step("soloist parallel_handoff")
    ours = await soloist_fanout(ctx, cfg.repeats)
    ctx.step("raw Ray + asyncio.Semaphore(4)")
    raws = ctx.raw_subagents()
    args = {"seconds": cfg.fanout_sleep_s}
    await asyncio.gather(*[r.call.remote("sleep", args) for r in raws])
    raw = await best(lambda: raw_fanout(raws, cfg.fanout_calls, "sleep", args), cfg.repeats)
    params = {"calls": cfg.fanout_calls, "sleep_s": cfg.fanout_sleep_s, "cap": CAP, "ideal_s": ideal}
    figures = [
        Figure(measure=NAME, name="fan-out wall time vs ideal", value=ours, baseline=ideal,
               baseline_name=f"ideal ({ideal:g} s)", unit="s", better="lower", target=1 / EFFICIENCY_TARGET, params=params),
        Figure(measure=NAME, name="fan-out wall time vs raw Ray", value=ours, baseline=raw,
               baseline_name="raw Ray + asyncio.Semaphore(4)", unit="s", better="lower", params=params),
    ]
    notes = [f"parallel efficiency (ideal / wall): soloist {ideal / ours:.3f}, raw Ray {ideal / raw:.3f}"]
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)
