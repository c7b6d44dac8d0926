"""How big each measure runs: the full run, ``--quick`` and the smallest (test) configuration.

Sizes only: every preset runs the same code, so the test of the smallest configuration
keeps the full benchmark from rotting. The quick preset runs every measure and keeps the
40-call sleeping fan-out, but shrinks call counts, state sizes, the recovery journals,
replicas, nodes and runs so the whole run stays under two minutes on 2 cores.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["BenchConfig", "Mode", "preset"]

Mode = Literal["full", "quick", "smallest"]


class BenchConfig(BaseModel):
    """Sizes of every measure. ``rounds``: how many interleaved rounds (soloist, then baseline,
    alternating which goes first) each figure's median ratio is taken over."""

    model_config = ConfigDict(frozen=True)

    mode: Mode = "full"
    rounds: int = Field(5, ge=1)
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
    cold_handoff_calls: int = Field(8, ge=1)
    """Single handoffs per round each after an idle gap of ``cold_gap_s`` (the cold figure)."""
    cold_gap_s: float = Field(0.2, ge=0)
    idle_handoff_calls: int = Field(3, ge=1)
    """Single handoffs per round each after ``idle_gap_s``: longer than a replica keeps an idle
    permit (0.5 s), so each one asks the semaphore again (the slowest single handoff)."""
    idle_gap_s: float = Field(1.0, ge=0)
    parallel_calls: int = Field(800, ge=1)
    # (4, 5) parallel efficiency and the LangGraph peer: the same fan-out.
    fanout_calls: int = Field(40, ge=1)
    fanout_sleep_s: float = Field(0.1, gt=0)
    # CPU-bound fan-out (against LangGraph): calls, each about this much pure-Python CPU.
    cpu_calls: int = Field(40, ge=1)
    cpu_seconds: float = Field(0.1, gt=0)
    # Fan-out from several driver processes sharing one run (one cap of 4 for all).
    drivers: int = Field(2, ge=1)
    driver_calls: int = Field(40, ge=1)
    # (6) horizontal scaling: node counts of a local Cluster, concurrent runs, calls per run.
    scaling_nodes: tuple[int, ...] = (1, 2, 3)
    scaling_runs: tuple[int, ...] = (1, 2, 4, 8)
    scaling_calls_per_run: int = Field(200, ge=1)
    scaling_sleep_s: float = Field(0.02, ge=0)
    scaling_node_runs: int = Field(4, ge=1)
    scaling_node_replicas: int = Field(6, ge=1)
    # (7) memory of the orchestrator actor: state size, and rounds (each builds two states in fresh processes).
    memory_messages: int = Field(100_000, ge=1)
    memory_rounds: int = Field(3, ge=1)
    # (8) recovery: changes journalled before the run is attached again.
    recovery_changes: tuple[int, ...] = (10_000, 100_000)
    """Journal lengths at which the orchestrator is SIGKILLed and recovers (ascending; one journal grows)."""
    checkpoint_every: int = Field(1_000, ge=1)
    recovery_kills: int = Field(3, ge=1)
    """SIGKILLs (rounds) per journal size, each beside a kill of the one-change baseline run."""
    scaling_rounds: int = Field(3, ge=1)
    """Rounds of the scaling measures (each round runs every level)."""
    # (9) metrics and tracing on vs off: no-op handoffs in one parallel batch.
    observability_calls: int = Field(400, ge=1)
    # (11) pool autoscaling (issue 28): runs (cap 4 each) handing off sleeping calls at once to a
    # pool from 1 replica up to ``pool_max_replicas``, a fixed pool of that many and Ray Serve.
    pool_runs: int = Field(10, ge=1)
    pool_calls_per_run: int = Field(40, ge=1)
    pool_sleep_s: float = Field(0.1, gt=0)
    pool_max_replicas: int = Field(40, ge=1)
    pool_window_s: float = Field(60.0, gt=0)
    """Each arm's burst-then-idle window (from the burst's start), over which replica-seconds count."""
    pool_rounds: int = Field(3, ge=1)
    """Rounds of the three arms (their order rotated each round)."""
    pool_downscale_delay_s: float | None = Field(None, ge=0)
    """The autoscaled pool's ``downscale_delay_s``; None: ``PoolPolicy``'s default (10 s). A
    window shorter than the default needs a shorter delay to see the pool shrink."""
    # (12) many runs (issue 29): durable runs on shared hosts, a tenth active, the rest waiting.
    many_runs: int = Field(10_000, ge=10)
    many_unload_after_s: float = Field(60.0, gt=0)
    """Idle seconds before a waiting run is unloaded from its host (the hosts' default, 60 s: longer
    than the start and first-work phases, so no run is unloaded before it has done its work)."""
    many_applies_per_run: int = Field(5, ge=1)
    """Applies per active run in each round of the summed-throughput figure."""
    many_latency_calls: int = Field(20, ge=1)
    """Sequential applies and handoffs per round of the latency figures."""
    many_waiting_runs: int = Field(100_000, ge=10)
    """Runs that wait for an approval, unloaded (issue 43's row: 100,000)."""
    many_waiting_unload_after_s: float = Field(5.0, gt=0)
    """Idle seconds before a waiting run is unloaded: it has done all its work by then."""
    many_waiting_answers: int = Field(1_000, ge=1)
    """Waiting runs answered at random once all wait."""
    # (13) the stores side by side (issue 30): SQLite and PostgreSQL. Apply throughput uses
    # ``durable_apply_calls`` and ``rounds``; recovery ``recovery_kills`` rounds of attaching.
    store_turns: int = Field(500, ge=1)
    """Turns of the store-size run, each appending one message."""
    store_writes: int = Field(100_000, ge=1)
    """Writes journalled with and without retention before the store is measured."""
    store_keep_versions: int = Field(1_000, ge=1)
    store_recovery_changes: int = Field(100_000, ge=1)
    """Changes of the run that is closed and attached again (the recovery figure)."""
    # (14) durable pydantic-ai agents (issue 44): plain, DBOS, soloist on SQLite and PostgreSQL.
    agent_conversations: int = Field(400, ge=1)
    """Conversations per arm and round at 0 ms model latency (5 steps each)."""
    agent_in_flight: int = Field(100, ge=1)
    """Conversations at once in the 0 ms rounds."""
    agent_wide_conversations: int = Field(1_000, ge=1)
    """Conversations started at once in the rounds at ``agent_latency_s`` (the wall-time figure)."""
    agent_latency_s: float = Field(0.2, ge=0)


def preset(mode: Mode) -> BenchConfig:
    """The configuration of a named mode."""
    if mode == "full":
        return BenchConfig()
    if mode == "quick":
        # Most of a quick run is fixed cost (worker processes starting on 2 cores), so besides
        # call counts it runs 2 interleaved rounds (one in each order) and starts fewer
        # processes: 2 replicas per skill (still one per core for the CPU-bound fan-out), 2
        # nodes, 2 runs, 2 state sizes, one journal size killed once per mode (each kill is a
        # worker process restarting); and it builds smaller states.
        return BenchConfig(
            mode="quick", rounds=2, replicas=2, apply_calls=300, durable_apply_calls=150,
            snapshot_sizes=(10, 10_000), snapshot_reads=1,
            handoff_calls=30, cold_handoff_calls=3, idle_handoff_calls=1, parallel_calls=80, cpu_calls=8, driver_calls=8,
            scaling_nodes=(1, 2), scaling_runs=(1, 2), scaling_calls_per_run=30, scaling_node_runs=1,
            scaling_node_replicas=2, memory_messages=20_000, memory_rounds=1,
            recovery_changes=(600,), checkpoint_every=250, recovery_kills=1, scaling_rounds=1, observability_calls=60,
            # Two runs of the 40-call fan-out (up to 8 calls in flight; up to 8 replicas), a 4 s
            # window and a 0.5 s downscale delay so the pool shrinks inside it (a replica grown
            # for the burst that never got a call still waits 2 s).
            pool_runs=2, pool_max_replicas=8, pool_window_s=4.0, pool_rounds=2, pool_downscale_delay_s=0.5,
            many_runs=300, many_unload_after_s=1.0, many_latency_calls=5,
            many_waiting_runs=2_000, many_waiting_unload_after_s=1.0, many_waiting_answers=100,
            store_turns=100, store_writes=5_000, store_keep_versions=1_000, store_recovery_changes=3_000,
            agent_conversations=100, agent_in_flight=50, agent_wide_conversations=200,
        )
    if mode == "smallest":
        return BenchConfig(
            mode="smallest", rounds=1, replicas=1, apply_calls=50, durable_apply_calls=20, snapshot_sizes=(10,),
            snapshot_reads=1, handoff_calls=5, cold_handoff_calls=1, cold_gap_s=0.01, idle_handoff_calls=1, idle_gap_s=0.01,
            parallel_calls=20, fanout_calls=8,
            fanout_sleep_s=0.02, cpu_calls=4, cpu_seconds=0.01, drivers=2, driver_calls=4,
            scaling_nodes=(1, 2), scaling_runs=(1, 2), scaling_calls_per_run=8, scaling_sleep_s=0.0,
            scaling_node_runs=1, scaling_node_replicas=1,
            memory_messages=1_000, memory_rounds=1, recovery_changes=(100, 200), recovery_kills=1, scaling_rounds=1,
            checkpoint_every=50, observability_calls=20,
            pool_runs=2, pool_calls_per_run=8, pool_sleep_s=0.02, pool_max_replicas=2, pool_window_s=0.5,
            pool_rounds=1, pool_downscale_delay_s=0.5,
            many_runs=40, many_unload_after_s=0.5, many_applies_per_run=2, many_latency_calls=2,
            many_waiting_runs=300, many_waiting_unload_after_s=0.5, many_waiting_answers=5,
            store_turns=10, store_writes=300, store_keep_versions=100, store_recovery_changes=200,
            agent_conversations=4, agent_in_flight=2, agent_wide_conversations=4, agent_latency_s=0.02,
        )
    raise ValueError(f"unknown benchmark mode {mode!r}; use 'full', 'quick' or 'smallest'")
