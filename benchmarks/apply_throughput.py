"""(1) Apply throughput: ``apply(fn)`` against a raw actor call with the same payload; durability; ``apply_batch``.

``n`` applies of the smallest real write (``state.n += 1`` on a one-field model) are
submitted at once (pipelined) and awaited together. The baseline is the equivalent raw Ray
program: an async actor (same options as the orchestrator's) holding the same state, sent the
same arguments (the same pickled ``fn``, a token of the same length and a fresh request id
per call) the same way, which applies ``fn`` in place. The durable figures journal to a
SQLite file in a temporary directory (``sync``, ``batch``) and are set against apply without
a store, measured in the same rounds; ``apply_batch`` (transitions as data) is set beside
``apply(fn)`` making the same change to an ``AgentState``. Every round times each variant
once, in a rotating order.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from actors import Orchestrator
from benchmarks._harness import BenchContext, Counter, RawCounter, bump, close_run, run_name, start_runs, timed
from benchmarks.results import Figure, MeasureResult
from coordinators import AgentState, TransitionBatch

NAME = "apply_throughput"
TITLE = "Apply throughput (small state) vs a raw actor call with the same payload, pipelined"
APPLY_TARGET = 0.8  # apply without a store >= 0.8 of the raw call
SYNC_TARGET = 0.6  # sync durability >= 0.6 of apply without a store
BATCH_TARGET = 0.9  # batch durability >= 0.9 of apply without a store


def steps(ctx: BenchContext) -> int:
    return ctx.config.rounds + 1


def _set_n(state: AgentState) -> None:
    state.conversation_state["n"] = 1


async def _pipelined(n: int, submit: Callable[[], Awaitable[Any]]) -> None:
    await asyncio.gather(*[submit() for _ in range(n)])


async def run(ctx: BenchContext) -> MeasureResult:
    cfg = ctx.config
    n, n_durable = cfg.apply_calls, cfg.durable_apply_calls
    raw = RawCounter.remote()
    token = secrets.token_urlsafe(32)  # the same length as an orchestrator's token
    await raw.apply_fn.remote(token, uuid.uuid4().hex, bump)  # started and warm
    ctx.step("starting orchestrators")
    with tempfile.TemporaryDirectory(prefix="soloist-bench-") as tmp:
        plain, sync, batch, agent = await start_runs(
            lambda: Orchestrator(Counter(), name=run_name("apply")),
            lambda: Orchestrator(Counter(), name=run_name("sync"), store=os.path.join(tmp, "sync.db"), durability="sync"),
            lambda: Orchestrator(Counter(), name=run_name("batch"), store=os.path.join(tmp, "batch.db"), durability="batch"),
            lambda: Orchestrator(AgentState(), name=run_name("agent")),
        )
        one_change = tuple(TransitionBatch().update_state("n", 1))
        variants: dict[str, tuple[int, Callable[[], Awaitable[Any]]]] = {
            "raw": (n, lambda: raw.apply_fn.remote(token, uuid.uuid4().hex, bump)),
            "plain": (n, lambda: plain.apply(bump)),
            "sync": (n_durable, lambda: sync.apply(bump)),
            "batch": (n_durable, lambda: batch.apply(bump)),
            "agent fn": (n, lambda: agent.apply(_set_n)),
            "agent batch": (n, lambda: agent.apply_batch(one_change)),
        }
        rates: dict[str, list[float]] = {k: [] for k in variants}
        try:
            for orch in (plain, sync, batch):
                await orch.apply(bump)
            await agent.apply(_set_n)
            await agent.apply_batch(one_change)
            order = list(variants)
            for r in range(cfg.rounds):
                ctx.step(f"round {r + 1} of {cfg.rounds}")
                shift = r % len(order)
                for key in order[shift:] + order[:shift]:
                    calls, submit = variants[key]
                    seconds = await timed(lambda: _pipelined(calls, submit))
                    rates[key].append(calls / seconds)
        finally:
            for orch in (plain, sync, batch, agent):
                await close_run(orch)
    ctx.step("done")

    def fig(name: str, ours: str, base: str, base_name: str, target: float | None, params: dict[str, Any]) -> Figure:
        return Figure(measure=NAME, name=name, values=rates[ours], baselines=rates[base], baseline_name=base_name,
                      unit="ops/s", better="higher", target=target, params=params)

    figures = [
        fig("apply, no store", "plain", "raw", "raw actor call, same payload (pickled fn, token, request id), pipelined",
            APPLY_TARGET, {"calls": n}),
        fig("apply, sync durability", "sync", "plain", "apply without a store, same rounds", SYNC_TARGET,
            {"calls": n_durable, "store": "sqlite file"}),
        fig("apply, batch durability", "batch", "plain", "apply without a store, same rounds", BATCH_TARGET,
            {"calls": n_durable, "store": "sqlite file"}),
        fig("apply_batch (transitions as data)", "agent batch", "agent fn", "apply(fn) making the same change to an AgentState",
            None, {"calls": n}),
    ]
    med = {k: sorted(v)[len(v) // 2] for k, v in rates.items()}
    notes = [
        f"applies per second (median of rounds): raw call {med['raw']:,.0f}, no store {med['plain']:,.0f}, "
        f"sync {med['sync']:,.0f}, batch {med['batch']:,.0f}; on an AgentState: apply(fn) {med['agent fn']:,.0f}, "
        f"apply_batch {med['agent batch']:,.0f}",
        "sync holds the write lock through each fsync; batch shares one fsync among concurrent applies (group commit).",
    ]
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)
