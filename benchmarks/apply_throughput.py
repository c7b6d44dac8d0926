"""(1) Apply throughput against the raw ceiling, without a store and with ``sync``/``batch``.

``n`` applies of the smallest real write (``state.n += 1`` on a one-field model) are
submitted at once (pipelined) and awaited together; the baseline is the same number of
calls to a trivial async Ray actor method, pipelined the same way, in the same run. The
durable figures journal to a SQLite file in a temporary directory; they are also issue 4's
figure "applies per second for sync, batch and no store".
"""

from __future__ import annotations

import asyncio
import os
import tempfile

from actors import Orchestrator
from benchmarks._harness import BenchContext, Counter, RawCounter, best, bump, close_run, run_name
from benchmarks.results import Figure, MeasureResult

NAME = "apply_throughput"
TITLE = "Apply throughput (small state) vs a trivial Ray actor method, pipelined"
APPLY_TARGET = 0.7  # the bar: apply throughput at least 0.7 of raw


def steps(ctx: BenchContext) -> int:
    return 4


async def _rate(n: int, submit, repeats: int) -> float:
    seconds = await best(lambda: asyncio.gather(*[submit() for _ in range(n)]), repeats)
    return n / seconds


async def run(ctx: BenchContext) -> MeasureResult:
    cfg = ctx.config
    raw = RawCounter.remote()
    await raw.bump.remote()  # started and warm
    figures: list[Figure] = []

    async def raw_rate(n: int) -> float:
        return await _rate(n, lambda: raw.bump.remote(), cfg.repeats)

    with tempfile.TemporaryDirectory(prefix="soloist-bench-") as tmp:
        for durability in (None, "sync", "batch"):
            label = "no store" if durability is None else f"{durability} durability"
            ctx.step(label if durability is None else f"{label} (SQLite)")
            store = None if durability is None else os.path.join(tmp, f"{durability}.db")
            calls = cfg.apply_calls if durability is None else cfg.durable_apply_calls
            orch = Orchestrator(Counter(), name=run_name(durability or "apply"), store=store, durability=durability or "sync")
            try:
                await orch.apply(bump)
                ours = await _rate(calls, lambda: orch.apply(bump), cfg.repeats)
                base = await raw_rate(calls)
            finally:
                await close_run(orch)
            params: dict[str, object] = {"calls": calls}
            if store is not None:
                params["store"] = "sqlite file"
            figures.append(Figure(
                measure=NAME, name=f"apply, {label}", value=ours, baseline=base,
                baseline_name="trivial Ray actor method, pipelined", unit="ops/s", better="higher",
                target=APPLY_TARGET if durability is None else None, params=params,
            ))
    ctx.step("done")
    notes = [
        "no store / sync / batch in applies per second: "
        + ", ".join(f"{f.name.split(', ')[1]} {f.value:,.0f}/s" for f in figures),
        "sync holds the write lock through each fsync; batch shares one fsync among concurrent applies (group commit).",
    ]
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)
