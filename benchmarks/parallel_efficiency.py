"""(4) Parallel efficiency: 40 skills that each sleep 100 ms, at cap 4 (ideal: 1.0 s).

Wall time of one ``parallel_handoff`` against the ideal ``calls / cap * sleep``; the same
fan-out in raw Ray (``asyncio.Semaphore(4)`` over four raw subagents) is measured beside
it, round by round, so what the runtime adds is separated from what Ray itself costs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from actors import Call, Orchestrator, parallel_handoff
from benchmarks._harness import BenchContext, Counter, SleepIn, SleepOut, interleaved
from benchmarks.handoff_overhead import raw_fanout
from benchmarks.results import Figure, MeasureResult

NAME = "parallel_efficiency"
TITLE = "Parallel efficiency: sleeping skills at cap 4, wall time vs ideal"
IDEAL_TARGET = 1.03  # within 3% of the ideal wall time
CAP = 4


def steps(ctx: BenchContext) -> int:
    return 2


def ideal_seconds(calls: int, sleep_s: float, cap: int = CAP) -> float:
    """Wall time of ``calls`` sleeps at ``cap`` in flight with zero overhead."""
    return -(-calls // cap) * sleep_s


@contextlib.asynccontextmanager
async def fanout_run(ctx: BenchContext) -> AsyncIterator[Orchestrator[Counter]]:
    """The bench's shared run handing off to its skills (the runner closes it at the end)."""
    yield await ctx.handoff_run()


async def warm_fanout(orch: Orchestrator[Counter], calls: list[Call], out_type: type) -> Callable[[], Awaitable[None]]:
    """Warm ``orch`` for ``calls`` (their skill's pool and the semaphore exist), and return a
    function that hands off ``calls`` in one ``parallel_handoff``."""
    await parallel_handoff(orch, calls[:CAP], out_type)

    async def once() -> None:
        results = await parallel_handoff(orch, calls, out_type)
        failed = [r.error for r in results if r.error is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} fan-out handoffs failed, first: {failed[0]!r}")

    return once


async def run(ctx: BenchContext) -> MeasureResult:
    cfg = ctx.config
    ideal = ideal_seconds(cfg.fanout_calls, cfg.fanout_sleep_s)
    ctx.step("warming up")
    raws = ctx.raw_subagents()
    args = {"seconds": cfg.fanout_sleep_s}
    await asyncio.gather(*[r.call.remote("sleep", args) for r in raws])
    calls = [Call("sleep", SleepIn(seconds=cfg.fanout_sleep_s))] * cfg.fanout_calls
    async with fanout_run(ctx) as orch:
        once = await warm_fanout(orch, calls, SleepOut)
        ctx.step("soloist parallel_handoff and raw Ray + asyncio.Semaphore(4), interleaved")
        ours, raw = await interleaved(once, lambda: raw_fanout(raws, cfg.fanout_calls, "sleep", args), cfg.rounds)
    params = {"calls": cfg.fanout_calls, "sleep_s": cfg.fanout_sleep_s, "cap": CAP, "ideal_s": ideal}
    figures = [
        Figure(measure=NAME, name="fan-out wall time vs ideal", values=ours, baselines=[ideal] * len(ours),
               baseline_name=f"ideal ({ideal:g} s)", unit="s", better="lower", target=IDEAL_TARGET, params=params),
        Figure(measure=NAME, name="fan-out wall time vs raw Ray", values=ours, baselines=raw,
               baseline_name="raw Ray + asyncio.Semaphore(4)", unit="s", better="lower", params=params),
    ]
    med_ours, med_raw = figures[0].value, figures[1].baseline
    notes = [f"parallel efficiency (ideal / median wall): soloist {ideal / med_ours:.2f}, raw Ray {ideal / med_raw:.2f}"]
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)
