"""(3) Handoff overhead: one no-op handoff (warm, and cold after an idle gap) vs one raw actor
call; parallel no-op throughput at cap 4 vs raw Ray under ``asyncio.Semaphore(4)``.

The raw equivalent of a subagent is an actor that holds the same ``SkillRegistry`` and runs
the same ``noop`` skill; a handoff adds its cluster-wide permit, the subagent pool,
telemetry and decoding. *Warm*: handoffs back to back, so a permit released by one is still
cached for the next. *Cold*: each handoff (and each raw call) follows ``cold_gap_s`` of idle
time, as between the turns of a run loop; a replica keeps an idle permit for 0.5 s, so the
next handoff of the loop still finds it. *Idle*: each follows ``idle_gap_s``, longer than
that, so the replica's permit was given back and the handoff asks the semaphore again.
The parallel figure runs no-op calls through ``parallel_handoff`` at cap 4 and through raw
Ray under a plain ``asyncio.Semaphore(4)`` over as many raw subagents as the pool has replicas.
"""

from __future__ import annotations

import asyncio
import itertools
import time

from actors import Call, handoff, parallel_handoff
from benchmarks._harness import BenchContext, NoopOut, interleaved
from benchmarks.results import Figure, MeasureResult

NAME = "handoff_overhead"
TITLE = "Handoff overhead vs a raw actor call (warm and cold); parallel_handoff at cap 4 vs raw Ray + asyncio.Semaphore(4)"
WARM_TARGET = 1.2  # one warm handoff at most 1.2x a raw call
COLD_TARGET = 1.5  # one cold handoff at most 1.5x a raw call
PARALLEL_TARGET = 0.9  # parallel no-op throughput at least 0.9 of raw Ray


def steps(ctx: BenchContext) -> int:
    return 4


async def raw_fanout(actors: list, n: int, skill: str, arguments: dict, cap: int = 4) -> None:
    """``n`` raw calls round robin over ``actors``, at most ``cap`` in flight."""
    sem = asyncio.Semaphore(cap)
    turn = itertools.cycle(actors)

    async def one() -> None:
        async with sem:
            await next(turn).call.remote(skill, arguments)

    await asyncio.gather(*[one() for _ in range(n)])


async def run(ctx: BenchContext) -> MeasureResult:
    cfg = ctx.config
    ctx.step("warming up subagents")
    orch = await ctx.handoff_run()
    raws = ctx.raw_subagents()
    await parallel_handoff(orch, [Call("noop")] * 8, NoopOut)
    await asyncio.gather(*[r.call.remote("noop", {}) for r in raws])

    ctx.step("warm single handoffs")
    n = cfg.handoff_calls

    async def ours_single() -> None:
        for _ in range(n):
            await handoff(orch, Call("noop"), NoopOut)

    async def raw_single() -> None:
        for _ in range(n):
            await raws[0].call.remote("noop", {})

    ours, base = await interleaved(ours_single, raw_single, cfg.rounds)
    warm = Figure(
        measure=NAME, name="one no-op handoff, warm", values=[s * 1e3 / n for s in ours], baselines=[s * 1e3 / n for s in base],
        baseline_name="one raw call to an equivalent actor", unit="ms", better="lower", target=WARM_TARGET,
        params={"calls": n},
    )

    async def after_gaps(call, gap: float, k: int) -> float:  # the calls alone, not the idle gaps
        spent = 0.0
        for _ in range(k):
            await asyncio.sleep(gap)
            started = time.perf_counter()
            await call()
            spent += time.perf_counter() - started
        return spent

    async def single_after(gap: float, k: int) -> tuple[list[float], list[float]]:
        """ms per handoff and per raw call, each after ``gap`` s idle; order alternates by round."""
        ours: list[float] = []
        base: list[float] = []
        for r in range(cfg.rounds):
            pair = [(ours, lambda: handoff(orch, Call("noop"), NoopOut)), (base, lambda: raws[0].call.remote("noop", {}))]
            for sink, call in (pair if r % 2 == 0 else pair[::-1]):
                sink.append(await after_gaps(call, gap, k) * 1e3 / k)
        return ours, base

    gap, k = cfg.cold_gap_s, cfg.cold_handoff_calls
    ctx.step(f"cold single handoffs ({gap * 1e3:.0f} ms idle before each)")
    cold_ours, cold_base = await single_after(gap, k)
    cold = Figure(
        measure=NAME, name=f"one no-op handoff, cold ({gap * 1e3:.0f} ms idle before)", values=cold_ours, baselines=cold_base,
        baseline_name="one raw call after the same idle gap", unit="ms", better="lower", target=COLD_TARGET,
        params={"calls": k, "idle_gap_s": gap},
    )
    idle_gap, idle_k = cfg.idle_gap_s, cfg.idle_handoff_calls
    ctx.step(f"single handoffs after {idle_gap * 1e3:.0f} ms idle (past the replicas' permit linger)")
    idle_ours, idle_base = await single_after(idle_gap, idle_k)
    idle = Figure(
        measure=NAME, name=f"one no-op handoff, {idle_gap * 1e3:.0f} ms idle before (its permit given back)",
        values=idle_ours, baselines=idle_base, baseline_name="one raw call after the same idle gap", unit="ms",
        better="lower", params={"calls": idle_k, "idle_gap_s": idle_gap},
    )

    ctx.step("parallel_handoff at cap 4")
    m = cfg.parallel_calls
    calls = [Call("noop")] * m
    ours, base = await interleaved(lambda: parallel_handoff(orch, calls, NoopOut), lambda: raw_fanout(raws, m, "noop", {}),
                                   cfg.rounds)
    parallel = Figure(
        measure=NAME, name="parallel_handoff no-op, cap 4", values=[m / s for s in ours], baselines=[m / s for s in base],
        baseline_name="raw Ray calls under asyncio.Semaphore(4)", unit="calls/s", better="higher", target=PARALLEL_TARGET,
        params={"calls": m, "cap": 4},
    )
    return MeasureResult(name=NAME, title=TITLE, figures=[warm, cold, idle, parallel])
