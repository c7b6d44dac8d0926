"""(8) Recovery time (issue 4): attach to a stored run whose journal holds N changes.

A durable run (SQLite file, ``batch`` durability, a checkpoint every ``checkpoint_every``
versions, as by default) takes N small writes and is closed; a new orchestrator is then
attached to the stored run and timed until it serves ``version()``. The baseline is the
time to start a fresh durable orchestrator on a new store file up to its first
``version()``: what any start costs, so the ratio is what recovery adds.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time

from actors import Orchestrator
from benchmarks._harness import BenchContext, Counter, bump, close_run, run_name
from benchmarks.results import Figure, MeasureResult

NAME = "recovery"
TITLE = "Recovery: attach to a stored run with a long journal (checkpoints on) vs a fresh start"
_CHUNK = 500  # writes in flight while the journal is built (group commit shares the fsyncs)


def steps(ctx: BenchContext) -> int:
    return 3


async def _fill(orch: Orchestrator[Counter], changes: int) -> None:
    done = 0
    while done < changes:
        n = min(_CHUNK, changes - done)
        await asyncio.gather(*[orch.apply(bump) for _ in range(n)])
        done += n


async def run(ctx: BenchContext) -> MeasureResult:
    cfg = ctx.config
    n = cfg.recovery_changes
    with tempfile.TemporaryDirectory(prefix="soloist-bench-") as tmp:
        ctx.step(f"journalling {n:,} changes")
        path, name = os.path.join(tmp, "recovery.db"), run_name("recover")
        orch = Orchestrator(Counter(), name=name, store=path, durability="batch", checkpoint_every=cfg.checkpoint_every)
        build_started = time.perf_counter()
        await _fill(orch, n)
        build_s = time.perf_counter() - build_started
        expected = await orch.version()
        await close_run(orch)

        ctx.step("attaching to the stored run")
        started = time.perf_counter()
        again = Orchestrator.attach(name, store=path, durability="batch")
        version = await again.version()
        recovery_s = time.perf_counter() - started
        value = (await again.snapshot()).n
        await close_run(again)
        if version != expected or value != n:
            raise RuntimeError(f"recovered version {version} (state n={value}); expected version {expected} with n={n}")

        ctx.step("fresh durable start (baseline)")
        started = time.perf_counter()
        fresh = Orchestrator(Counter(), name=run_name("fresh"), store=os.path.join(tmp, "fresh.db"), durability="batch",
                             checkpoint_every=cfg.checkpoint_every)
        await fresh.version()
        fresh_s = time.perf_counter() - started
        await close_run(fresh)
    figure = Figure(
        measure=NAME, name=f"recovery, {n:,} journalled changes", value=recovery_s, baseline=fresh_s,
        baseline_name="fresh durable orchestrator to its first version()", unit="s", better="lower",
        params={"changes": n, "checkpoint_every": cfg.checkpoint_every, "durability": "batch"},
    )
    notes = [
        f"recovered version {version} in {recovery_s:.2f} s (fresh start {fresh_s:.2f} s); "
        f"building the journal took {build_s:.1f} s ({n / build_s:,.0f} applies/s, batch durability, {_CHUNK} in flight)",
    ]
    return MeasureResult(name=NAME, title=TITLE, figures=[figure], notes=notes)
