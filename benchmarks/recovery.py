"""(8) Crash recovery (issue 4): SIGKILL the orchestrator's process with N changes in its journal.

A durable run (SQLite file, ``batch`` durability) takes N small writes; then its actor
process is killed with SIGKILL, so nothing is flushed and no final checkpoint is written.
Ray restarts the actor, which loads the newest checkpoint and replays every journal entry
after it. The figure is the time from the kill until ``version()`` answers with version N
(the state is then checked: ``n`` must equal the writes). Two journals grow side by side
through the sizes of ``recovery_changes``: one without checkpoints (every entry is
replayed) and one with a checkpoint every ``checkpoint_every`` versions. The baseline, in
the same rounds, is the same kill and restart of a durable run with one change: what any
restart costs, so the ratio is what replaying adds (one such kill per round serves both
journals; the order of the three kills rotates round by round). The actor's pid comes from an ``fn``
that raises it as an exception (the public API; the state does not change).
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time

from pydantic import BaseModel

from actors import Orchestrator
from benchmarks._harness import BenchContext, close_run, run_name, start_runs
from benchmarks.results import Figure, MeasureResult

NAME = "recovery"
TITLE = "Recovery after SIGKILL: restart and replay a journal of N changes vs restarting a run of one change"
RECOVERY_TARGET_S = 2.0  # a 100,000-change journal with checkpoints recovers within 2 s
_CHUNK = 1_000  # writes in flight while a journal is built (group commit shares the fsyncs)


class Journalled(BaseModel):
    n: int = 0


class ActorPid(Exception):
    """Raised by ``_pid`` inside the actor to carry its pid out without writing anything."""

    def __init__(self, pid: int) -> None:
        super().__init__(pid)
        self.pid = pid


def _bump(state: Journalled) -> None:
    state.n += 1


def _pid(state: Journalled) -> None:
    raise ActorPid(os.getpid())


def steps(ctx: BenchContext) -> int:
    return 3 * len(ctx.config.recovery_changes) + 1


async def _fill(orch: Orchestrator[Journalled], changes: int) -> None:
    done = 0
    while done < changes:
        k = min(_CHUNK, changes - done)
        await asyncio.gather(*[orch.apply(_bump) for _ in range(k)])
        done += k


async def _pid_of(orch: Orchestrator[Journalled]) -> int:
    try:
        await orch.apply(_pid)
    except ActorPid as found:
        return found.pid
    raise RuntimeError("the pid probe did not raise")


async def _kill_and_recover(orch: Orchestrator[Journalled], expected: int) -> float:
    """SIGKILL the actor's process; seconds until the restarted actor answers ``version()``."""
    pid = await _pid_of(orch)
    started = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    version = await orch.version()
    seconds = time.perf_counter() - started
    value = (await orch.snapshot()).n
    if version != expected or value != expected:
        raise RuntimeError(f"recovered version {version} with n={value}; expected both to be {expected}")
    return seconds


async def run(ctx: BenchContext) -> MeasureResult:
    cfg = ctx.config
    sizes = sorted(cfg.recovery_changes)
    kills = cfg.recovery_kills
    figures: list[Figure] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="soloist-bench-") as tmp:
        ctx.step("starting runs")

        def durable(prefix: str, every: int) -> Orchestrator[Journalled]:
            name = run_name(prefix)
            # Dedicated: the measure SIGKILLs the run's process, and a host's would take every
            # other run of the benchmark with it (many_runs measures hosts).
            return Orchestrator(Journalled(), name=name, store=os.path.join(tmp, f"{name}.db"), durability="batch",
                                checkpoint_every=every, dedicated=True)

        runs = await start_runs(lambda: durable("recover-one", cfg.checkpoint_every), lambda: durable("recover-plain", 0),
                                lambda: durable("recover-ckpt", cfg.checkpoint_every))
        small = runs[0]
        journals = {"without checkpoints": runs[1], f"checkpoint every {cfg.checkpoint_every:,}": runs[2]}
        try:
            await small.apply(_bump)
            built = 0
            for size in sizes:
                build: dict[str, float] = {}
                for label, orch in journals.items():
                    ctx.step(f"{label}: journalling up to {size:,} changes")
                    started = time.perf_counter()
                    await _fill(orch, size - built)
                    build[label] = time.perf_counter() - started
                ctx.step(f"{size:,} changes: {kills} kill(s) of each journal and of the one-change run")
                # One kill of the one-change run per round serves as the baseline of both journals
                # (any restart costs it); the order rotates round by round.
                recovered: dict[str, list[float]] = {label: [] for label in journals}
                base: list[float] = []
                targets = [(base, small, 1), *[(recovered[label], orch, size) for label, orch in journals.items()]]
                for r in range(kills):
                    shift = r % len(targets)
                    for sink, target_orch, expected in targets[shift:] + targets[:shift]:
                        sink.append(await _kill_and_recover(target_orch, expected))
                for label in journals:
                    ours, build_s = recovered[label], build[label]
                    params: dict[str, float | int | str] = {
                        "changes": size, "checkpoint_every": cfg.checkpoint_every if "every" in label else 0, "durability": "batch"}
                    figures.append(Figure(
                        measure=NAME, name=f"recovery of {size:,} changes, {label}", values=ours, baselines=base,
                        baseline_name="the same kill and restart of a run with one change", unit="s", better="lower",
                        params=params,
                    ))
                    if "every" in label and size == sizes[-1]:
                        figures.append(Figure(
                            measure=NAME, name=f"recovery of {size:,} changes, {label}, vs the budget", values=ours,
                            baselines=[RECOVERY_TARGET_S] * len(ours), baseline_name=f"{RECOVERY_TARGET_S:g} s budget",
                            unit="s", better="lower", target=1.0, params=params,
                        ))
                    notes.append(f"{label}, {size:,} changes: recovered in {sorted(ours)[len(ours) // 2]:.2f} s "
                                 f"(median of {kills}; restart of a one-change run {sorted(base)[len(base) // 2]:.2f} s); "
                                 f"journalling {size - built:,} more took {build_s:.1f} s "
                                 f"({(size - built) / build_s:,.0f} applies/s, batch, {_CHUNK} in flight)")
                built = size
        finally:
            for orch in runs:
                await close_run(orch)
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)
