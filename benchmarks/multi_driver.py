"""(10) Fan-out from several driver processes sharing one run (one cluster-wide cap of 4).

``drivers`` processes (2 by default) attach to the same named run and, on a signal, each
hand off ``driver_calls`` sleeping calls at once; the wall time is from the first start to
the last end (wall clocks of one machine). The cap is the run's, not the process's, so the
ideal is ``drivers x driver_calls / 4 x sleep``: two drivers must not go faster than one
driver handing off the same total (that would break the cap), nor much slower. Baselines,
round by round: one driver (this process) handing off the same total through the same run,
and the ideal.
"""

from __future__ import annotations

import asyncio
import json
import sys

import ray

from actors import Call, parallel_handoff
from benchmarks._harness import BenchContext, SleepIn, SleepOut, timed
from benchmarks.parallel_efficiency import CAP, ideal_seconds
from benchmarks.results import Figure, MeasureResult

NAME = "multi_driver"
TITLE = "Fan-out from several driver processes sharing one run vs one driver, same total and cap"
_START_TIMEOUT_S = 120.0


def steps(ctx: BenchContext) -> int:
    return ctx.config.rounds + 1


async def _round_of_children(children: list[asyncio.subprocess.Process]) -> float:
    for child in children:
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        await child.stdin.drain()
    reports = []
    for child in children:
        assert child.stdout is not None
        reports.append(json.loads(await child.stdout.readline()))
    failed = sum(r["failed"] for r in reports)
    if failed:
        raise RuntimeError(f"{failed} handoffs failed in the driver processes")
    return max(r["end"] for r in reports) - min(r["start"] for r in reports)


async def run(ctx: BenchContext) -> MeasureResult:
    cfg = ctx.config
    k, n, sleep_s = cfg.drivers, cfg.driver_calls, cfg.fanout_sleep_s
    ctx.step(f"starting {k} driver processes")
    orch = await ctx.handoff_run()
    address = ray.get_runtime_context().gcs_address
    children: list[asyncio.subprocess.Process] = []
    ours: list[float] = []
    single: list[float] = []
    total = [Call("sleep", SleepIn(seconds=sleep_s))] * (k * n)
    try:
        await parallel_handoff(orch, total[:CAP], SleepOut)
        for _ in range(k):
            children.append(await asyncio.create_subprocess_exec(
                sys.executable, "-m", "benchmarks._driver_child", address, orch.name, str(n), str(sleep_s),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE))
        for child in children:
            assert child.stdout is not None
            line = await asyncio.wait_for(child.stdout.readline(), _START_TIMEOUT_S)
            if line.strip() != b"ready":
                raise RuntimeError(f"a driver process did not start (it printed {line!r}, exit code {child.returncode})")

        async def one_driver() -> None:
            results = await parallel_handoff(orch, total, SleepOut)
            if any(r.error is not None for r in results):
                raise RuntimeError("handoffs failed in the single driver")

        for r in range(cfg.rounds):
            ctx.step(f"round {r + 1} of {cfg.rounds}")
            if r % 2 == 0:
                ours.append(await _round_of_children(children))
                single.append(await timed(one_driver))
            else:
                single.append(await timed(one_driver))
                ours.append(await _round_of_children(children))
    finally:
        for child in children:
            if child.stdin is not None and not child.stdin.is_closing():
                child.stdin.write(b"stop\n")
                child.stdin.close()
        for child in children:
            try:
                await asyncio.wait_for(child.wait(), 30)
            except asyncio.TimeoutError:
                child.kill()
                await child.wait()
    ideal = ideal_seconds(k * n, sleep_s)
    params: dict[str, float | int | str] = {"drivers": k, "calls_per_driver": n, "sleep_s": sleep_s, "cap": CAP}
    figures = [
        Figure(measure=NAME, name=f"{k} drivers x {n} sleeping calls, one run", values=ours, baselines=single,
               baseline_name=f"one driver handing off {k * n} calls through the same run", unit="s", better="lower", params=params),
        Figure(measure=NAME, name=f"{k} drivers x {n} sleeping calls vs ideal", values=ours, baselines=[ideal] * len(ours),
               baseline_name=f"ideal ({ideal:g} s at cap {CAP})", unit="s", better="lower", params=params),
    ]
    notes = [f"wall time below the ideal would mean more than {CAP} calls in flight (the cap is the run's, across processes)"]
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)
