"""(3) Handoff overhead: one no-op handoff vs one raw actor call; parallel throughput at cap 4.

The raw equivalent of a subagent is an actor that holds the same ``SkillRegistry`` and runs
the same ``noop`` skill; a handoff adds its cluster-wide permit (acquire and release on the
semaphore actor), the subagent pool, telemetry and decoding. The parallel figure runs the
same no-op calls through ``parallel_handoff`` at cap 4 and through raw Ray under a plain
``asyncio.Semaphore(4)`` over four raw subagents.
"""

from __future__ import annotations

import asyncio
import itertools

from actors import Call, Orchestrator, handoff, parallel_handoff
from benchmarks._harness import BenchContext, Counter, NoopOut, best, close_run, run_name
from benchmarks.results import Figure, MeasureResult

NAME = "handoff_overhead"
TITLE = "Handoff overhead vs a raw actor call; parallel_handoff at cap 4 vs raw Ray + asyncio.Semaphore(4)"
HANDOFF_TARGET = 1.5  # the bar: a handoff at most 1.5x a raw call


def steps(ctx: BenchContext) -> int:
    return 3


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
    orch = Orchestrator(Counter(), caller=ctx.skills, name=run_name("handoff"))
    raws = ctx.raw_subagents()
    try:
        await parallel_handoff(orch, [Call("noop")] * 8, NoopOut)
        await asyncio.gather(*[r.call.remote("noop", {}) for r in raws])

        ctx.step("single handoffs")
        n = cfg.handoff_calls

        async def ours_single() -> None:
            for _ in range(n):
                await handoff(orch, Call("noop"), NoopOut)

        async def raw_single() -> None:
            for _ in range(n):
                await raws[0].call.remote("noop", {})

        ours = await best(ours_single, cfg.repeats) / n
        base = await best(raw_single, cfg.repeats) / n
        single = Figure(
            measure=NAME, name="one no-op handoff", value=ours * 1e3, baseline=base * 1e3,
            baseline_name="one raw call to an equivalent actor", unit="ms", better="lower", target=HANDOFF_TARGET,
            params={"calls": n},
        )

        ctx.step("parallel_handoff at cap 4")
        m = cfg.parallel_calls
        calls = [Call("noop")] * m
        ours_s = await best(lambda: parallel_handoff(orch, calls, NoopOut), cfg.repeats)
        base_s = await best(lambda: raw_fanout(raws, m, "noop", {}), cfg.repeats)
        parallel = Figure(
            measure=NAME, name="parallel_handoff no-op, cap 4", value=m / ours_s, baseline=m / base_s,
            baseline_name="raw Ray calls under asyncio.Semaphore(4)", unit="calls/s", better="higher",
            params={"calls": m, "cap": 4},
        )
    finally:
        await close_run(orch)
    return MeasureResult(name=NAME, title=TITLE, figures=[single, parallel])
