"""(7) Memory: peak RSS of the orchestrator actor doing a write at 100,000 messages vs a raw actor doing the same.

Both sides do the same work in a fresh process, each round: the state is built inside the
actor by the same function (``messages`` short messages appended to an empty ``AgentState``),
read once (a snapshot; the raw actor returns its state), and written once at full size (the
same function appends one message). The orchestrator runs ``fn`` on a working copy and
validates the result (copy-on-write); the raw actor applies it in place. The peak is
``VmHWM`` of ``/proc/<pid>/status``; each side's pid comes from an ``fn`` run inside it (the
orchestrator's through ``apply``, the public API). A second figure sets the orchestrator's
peak against its own peak before the state was built.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import ray

from actors import Orchestrator
from benchmarks._harness import BenchContext, close_run, run_name
from benchmarks.results import Figure, MeasureResult
from coordinators import AgentState, Message

NAME = "memory"
TITLE = "Peak RSS of a write at full size: the orchestrator actor vs a raw actor doing the same write"
MEMORY_TARGET = 1.5  # the orchestrator's peak at most 1.5x the raw actor's
_MB = 1024 * 1024


def steps(ctx: BenchContext) -> int:
    return ctx.config.memory_rounds


def peak_rss_bytes(pid: int) -> int:
    """``VmHWM`` (peak resident set) of a process on this machine, in bytes."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmHWM line; peak memory needs Linux")


def _record_pid(state: AgentState) -> None:
    state.conversation_state["bench_pid"] = os.getpid()


def _filler(messages: int) -> Callable[[AgentState], None]:
    def fill(state: AgentState) -> None:
        state.messages.extend(
            Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i}: the quick brown fox jumps over the lazy dog")
            for i in range(messages)
        )

    return fill


def _append_one(state: AgentState) -> None:
    state.messages.append(Message(role="user", content="one more"))


@ray.remote(num_cpus=0, max_concurrency=1000)
class RawState:
    """The raw equivalent: an async actor holding an ``AgentState`` that applies ``fn`` in place."""

    def __init__(self) -> None:
        self.state = AgentState()

    async def apply(self, fn: Callable[[Any], Any]) -> None:
        fn(self.state)

    async def get(self) -> AgentState:
        return self.state


async def _orchestrator_peaks(n: int) -> tuple[int, int, int]:
    """(empty peak, full peak, state JSON bytes) of a fresh orchestrator doing the work."""
    orch = Orchestrator(AgentState(), name=run_name("mem"), dedicated=True)  # a fresh process of its own
    try:
        await orch.apply(_record_pid)
        pid = int((await orch.snapshot()).conversation_state["bench_pid"])
        empty = peak_rss_bytes(pid)
        await orch.apply(_filler(n))
        state = await orch.snapshot()
        await orch.apply(_append_one)
        return empty, peak_rss_bytes(pid), len(state.model_dump_json())
    finally:
        await close_run(orch)


async def _raw_peak(n: int) -> int:
    raw = RawState.remote()
    try:
        await raw.apply.remote(_record_pid)
        pid = int((await raw.get.remote()).conversation_state["bench_pid"])
        await raw.apply.remote(_filler(n))
        await raw.get.remote()
        await raw.apply.remote(_append_one)
        return peak_rss_bytes(pid)
    finally:
        ray.kill(raw)


async def run(ctx: BenchContext) -> MeasureResult:
    if not os.path.exists("/proc/self/status"):
        return MeasureResult(name=NAME, title=TITLE, skipped="peak RSS is read from /proc (Linux only)")
    n = ctx.config.memory_messages
    ours: list[float] = []
    raws: list[float] = []
    empties: list[float] = []
    state_bytes = 0
    for r in range(ctx.config.memory_rounds):
        ctx.step(f"round {r + 1}: {n:,} messages, orchestrator and raw actor")
        if r % 2 == 0:
            empty, full, state_bytes = await _orchestrator_peaks(n)
            raw = await _raw_peak(n)
        else:
            raw = await _raw_peak(n)
            empty, full, state_bytes = await _orchestrator_peaks(n)
        ours.append(full / _MB)
        raws.append(raw / _MB)
        empties.append(empty / _MB)
    state_mb = state_bytes / _MB
    params: dict[str, float | int | str] = {"messages": n, "state_json_mb": round(state_mb, 2)}
    figures = [
        Figure(measure=NAME, name=f"peak RSS, write at {n:,} messages", values=ours, baselines=raws,
               baseline_name="raw actor building, reading and writing the same state in place", unit="MB", better="lower",
               target=MEMORY_TARGET, params=params),
        Figure(measure=NAME, name=f"peak RSS, {n:,} vs 0 messages", values=ours, baselines=empties,
               baseline_name="the same orchestrator before the state was built", unit="MB", better="lower", params=params),
    ]
    med = sorted(ours)[len(ours) // 2], sorted(raws)[len(raws) // 2], sorted(empties)[len(empties) // 2]
    notes = [f"state JSON {state_mb:.1f} MB; median peaks: orchestrator {med[0]:.0f} MB ({med[0] - med[2]:.0f} MB over its empty "
             f"peak), raw actor {med[1]:.0f} MB"]
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)
