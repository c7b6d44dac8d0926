"""(2) Snapshot latency for states of 10, 1,000 and 100,000 messages vs a raw ``ray.get``.

The baseline is an actor holding the very same ``AgentState`` object and returning it: what
Ray alone costs to ship that state to the caller. The ratio shows what the orchestrator adds
on top, and the absolute values how the cost grows with state size.
"""

from __future__ import annotations

import ray

from actors import Orchestrator
from benchmarks._harness import BenchContext, RawHolder, close_run, interleaved, run_name, start_runs
from benchmarks.results import Figure, MeasureResult
from coordinators import AgentState, Message

NAME = "snapshot_latency"
TITLE = "Snapshot latency by state size vs raw ray.get of the same object held by an actor"


def steps(ctx: BenchContext) -> int:
    return len(ctx.config.snapshot_sizes)


def state_of(messages: int) -> AgentState:
    """An ``AgentState`` with ``messages`` short user/assistant messages."""
    return AgentState(messages=[
        Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i}: the quick brown fox jumps over the lazy dog")
        for i in range(messages)
    ])


async def run(ctx: BenchContext) -> MeasureResult:
    cfg = ctx.config
    figures: list[Figure] = []
    states = {size: state_of(size) for size in cfg.snapshot_sizes}
    # Every size's orchestrator starts at once (their processes side by side), each closed after its size.
    runs = dict(zip(states, await start_runs(*[lambda s=s: Orchestrator(s, name=run_name("snap")) for s in states.values()])))
    try:
        for size, state in states.items():
            ctx.step(f"{size:,} messages")
            orch = runs.pop(size)
            holder = RawHolder.remote(state)
            try:
                await orch.snapshot()
                await holder.get.remote()
                reads = cfg.snapshot_reads

                async def ours_reads() -> None:
                    for _ in range(reads):
                        await orch.snapshot()

                async def raw_reads() -> None:
                    for _ in range(reads):
                        await holder.get.remote()

                ours, base = await interleaved(ours_reads, raw_reads, cfg.rounds)
            finally:
                await close_run(orch)
                ray.kill(holder)
            figures.append(Figure(
                measure=NAME, name=f"snapshot, {size:,} messages", values=[s * 1e3 / reads for s in ours],
                baselines=[s * 1e3 / reads for s in base],
                baseline_name="ray.get of the same object from an actor", unit="ms", better="lower",
                params={"messages": size},
            ))
    finally:
        for orch in runs.values():  # the sizes not reached (an error stopped the loop)
            await close_run(orch)
    notes = ["latency per snapshot (ms): " + ", ".join(f"{int(f.params['messages']):,} msgs {f.value:.2f}" for f in figures)]
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)
