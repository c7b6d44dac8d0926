"""How big each measure runs: the full run, ``--quick`` and the smallest (test) configuration.

Sizes only: every preset runs the same code, so the test of the smallest configuration
keeps the full benchmark from rotting. The quick preset keeps every size the issue names
that is cheap (state sizes, the 40-call fan-out, node and run counts) and shrinks call
counts and the recovery journal so the whole run takes about two minutes on 2 cores.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["BenchConfig", "Mode", "preset"]

Mode = Literal["full", "quick", "smallest"]


class BenchConfig(BaseModel):
    """Sizes of every measure. ``repeats`` is how many timed rounds a figure takes the best of."""

    model_config = ConfigDict(frozen=True)

    mode: Mode = "full"
    repeats: int = Field(3, ge=1)
    replicas: int = Field(4, ge=1)
    """Subagent replicas per skill, and raw subagents in the baselines (the same number)."""
    # (1) apply throughput: pipelined calls per round, without a store and with each durability.
    apply_calls: int = Field(3_000, ge=1)
    durable_apply_calls: int = Field(1_000, ge=1)
    # (2) snapshot latency: state sizes in messages, and reads per size per round.
    snapshot_sizes: tuple[int, ...] = (10, 1_000, 100_000)
    snapshot_reads: int = Field(5, ge=1)
    # (3) handoff overhead: sequential single handoffs, and no-op calls in one parallel batch.
    handoff_calls: int = Field(200, ge=1)
    parallel_calls: int = Field(800, ge=1)
    # (4, 5) parallel efficiency and the LangGraph peer: the same fan-out.
    fanout_calls: int = Field(40, ge=1)
    fanout_sleep_s: float = Field(0.1, gt=0)
    # (6) horizontal scaling: node counts of a local Cluster, concurrent runs, calls per run.
    scaling_nodes: tuple[int, ...] = (1, 2, 3)
    scaling_runs: tuple[int, ...] = (1, 2, 4, 8)
    scaling_calls_per_run: int = Field(200, ge=1)
    scaling_sleep_s: float = Field(0.02, ge=0)
    scaling_node_runs: int = Field(4, ge=1)
    scaling_node_replicas: int = Field(6, ge=1)
    # (7) memory of the orchestrator actor.
    memory_messages: int = Field(100_000, ge=1)
    # (8) recovery: changes journalled before the run is attached again.
    recovery_changes: int = Field(100_000, ge=1)
    checkpoint_every: int = Field(1_000, ge=1)
    # (9) metrics and tracing on vs off: no-op handoffs in one parallel batch.
    observability_calls: int = Field(400, ge=1)


def preset(mode: Mode) -> BenchConfig:
    """The configuration of a named mode."""
    if mode == "full":
        return BenchConfig()
    if mode == "quick":
        return BenchConfig(
            mode="quick", repeats=2, apply_calls=600, durable_apply_calls=200, snapshot_reads=1,
            handoff_calls=40, parallel_calls=160, scaling_calls_per_run=30, scaling_node_runs=1,
            scaling_node_replicas=3, recovery_changes=1_000, observability_calls=80,
        )
    if mode == "smallest":
        return BenchConfig(
            mode="smallest", repeats=1, replicas=1, apply_calls=50, durable_apply_calls=20, snapshot_sizes=(10,),
            snapshot_reads=1, handoff_calls=5, parallel_calls=20, fanout_calls=8, fanout_sleep_s=0.02,
            scaling_nodes=(1,), scaling_runs=(1, 2), scaling_calls_per_run=8, scaling_sleep_s=0.0,
            scaling_node_runs=1, scaling_node_replicas=1,
            memory_messages=1_000, recovery_changes=200, checkpoint_every=50, observability_calls=20,
        )
    raise ValueError(f"unknown benchmark mode {mode!r}; use 'full', 'quick' or 'smallest'")
