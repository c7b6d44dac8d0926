"""(7) Memory: peak RSS of the orchestrator actor holding a 100,000-message state.

The orchestrator's worker process reports its own pid through an ``apply`` (the public
API: ``fn`` runs inside the actor), and the peak is read from ``VmHWM`` in
``/proc/<pid>/status`` after the state is built in the actor, read once and written once at
full size (a write deep-copies and re-validates the state, so it is the peak). The baseline
is a raw actor holding the same state, built the same way, read once; a second figure
compares the orchestrator with the same orchestrator when it held an empty state.
"""

from __future__ import annotations

import os
from typing import Any

import ray

from actors import Orchestrator
from benchmarks._harness import BenchContext, RawHolder, close_run, run_name
from benchmarks.results import Figure, MeasureResult
from coordinators import AgentState, Message

NAME = "memory"
TITLE = "Peak RSS of the orchestrator actor with a large state vs a raw actor holding it"
_MB = 1024 * 1024


def steps(ctx: BenchContext) -> int:
    return 3


def peak_rss_bytes(pid: int) -> int:
    """``VmHWM`` (peak resident set) of a process on this machine, in bytes."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmHWM line; peak memory needs Linux")


def _record_pid(state: AgentState) -> None:
    state.conversation_state["bench_pid"] = os.getpid()


def _filler(messages: int) -> Any:
    def fill(state: AgentState) -> None:
        state.messages.extend(
            Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i}: the quick brown fox jumps over the lazy dog")
            for i in range(messages)
        )

    return fill


def _append_one(state: AgentState) -> None:
    state.messages.append(Message(role="user", content="one more"))


async def run(ctx: BenchContext) -> MeasureResult:
    if not os.path.exists("/proc/self/status"):
        return MeasureResult(name=NAME, title=TITLE, skipped="peak RSS is read from /proc (Linux only)")
    n = ctx.config.memory_messages
    ctx.step("empty orchestrator")
    orch = Orchestrator(AgentState(), name=run_name("mem"))
    try:
        await orch.apply(_record_pid)
        pid = int((await orch.snapshot()).conversation_state["bench_pid"])
        empty_peak = peak_rss_bytes(pid)
        ctx.step(f"{n:,} messages in the orchestrator")
        await orch.apply(_filler(n))
        state = await orch.snapshot()
        await orch.apply(_append_one)
        full_peak = peak_rss_bytes(pid)
    finally:
        await close_run(orch)
    ctx.step(f"{n:,} messages in a raw actor")
    empty_holder, holder = RawHolder.remote(AgentState()), RawHolder.remote(state)
    try:
        raw_empty = peak_rss_bytes(await empty_holder.pid.remote())
        raw_pid = await holder.pid.remote()
        await holder.get.remote()
        raw_peak = peak_rss_bytes(raw_pid)
    finally:
        ray.kill(empty_holder)
        ray.kill(holder)
    state_mb = len(state.model_dump_json()) / _MB
    params: dict[str, float | int | str] = {"messages": n, "state_json_mb": round(state_mb, 2)}
    figures = [
        Figure(measure=NAME, name=f"peak RSS, {n:,} messages", value=full_peak / _MB, baseline=raw_peak / _MB,
               baseline_name="raw actor holding the same state", unit="MB", better="lower", params=params),
        Figure(measure=NAME, name=f"peak RSS, {n:,} vs 0 messages", value=full_peak / _MB, baseline=empty_peak / _MB,
               baseline_name="the same orchestrator with an empty state", unit="MB", better="lower", params=params),
    ]
    notes = [
        f"state JSON {state_mb:.1f} MB; orchestrator peak grew {(full_peak - empty_peak) / _MB:.0f} MB over its empty peak, "
        f"a raw actor {(raw_peak - raw_empty) / _MB:.0f} MB over its own",
    ]
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)
