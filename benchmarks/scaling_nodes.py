"""(6b) Horizontal scaling over nodes: subagents spread over 1, 2 and 3 nodes of a local Cluster.

A ``ray.cluster_utils.Cluster`` is built (a head node of 2 CPUs, worker nodes of 1 CPU) and
grown node by node; at each size a fresh skill registry spreads its subagent replicas over
the live nodes (Ray's SPREAD strategy), and ``scaling_node_runs`` concurrent runs (4 by default, each its own cap of 4)
hand off sleeping calls at once. The figure is aggregate handoffs per second against one
node. Every "node" here is a raylet on this one machine: they share its cores, so this shows
the cost of distribution rather than extra hardware. This measure replaces the caller's Ray
session (it shuts it down first), so the runner runs it last.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import ray
from ray.cluster_utils import Cluster

from actors import Call, Orchestrator, parallel_handoff, pool_for
from benchmarks._harness import BenchContext, Counter, SleepIn, SleepOut, close_run, make_registry, run_name
from benchmarks.results import Figure, MeasureResult
from benchmarks.scaling_runs import aggregate_rate, saturation_note

NAME = "scaling_nodes"
TITLE = "Subagents over 1, 2 and 3 nodes of a local Cluster: aggregate handoffs/s vs one node"
OWN_CLUSTER = True
_OBJECT_STORE_BYTES = 100 * 1024 * 1024


def steps(ctx: BenchContext) -> int:
    return len(ctx.config.scaling_nodes) + 1


async def _at_size(ctx: BenchContext, nodes: int, grow: Callable[[], None]) -> tuple[list[float], int]:
    """Grow the cluster to ``nodes`` (``grow``) while this size's runs start; then the aggregate
    rate of each round, and how many nodes the replicas landed on. The subagent replicas are
    created by the first handoffs, once every node is up, so SPREAD sees all of them."""
    cfg = ctx.config
    skills = make_registry(replicas=cfg.scaling_node_replicas)  # 6 by default: even over 1, 2 and 3 nodes
    loop = asyncio.get_running_loop()
    # The runs start in worker threads (submitted here, at once); the node starts in this
    # thread, because Ray installs signal handlers when it starts a node.
    starting = [loop.run_in_executor(None, lambda i=i: Orchestrator(Counter(), caller=skills, name=run_name(f"nodes{nodes}-{i}")))
                for i in range(cfg.scaling_node_runs)]
    grown: BaseException | None = None
    try:
        grow()
    except Exception as exc:  # raised below, once the runs that did start are known (and closed)
        grown = exc
    made = await asyncio.gather(*starting, return_exceptions=True)
    runs = [r for r in made if isinstance(r, Orchestrator)]
    try:
        failed = [r for r in made if isinstance(r, BaseException)]
        if grown is not None or failed:
            raise grown or failed[0]
        warm = [Call("sleep", SleepIn(seconds=0))] * cfg.scaling_node_replicas
        await asyncio.gather(*[parallel_handoff(o, warm, SleepOut) for o in runs])
        used = {await h.node_id.remote() for h in pool_for(skills, "sleep").handles()}
        rates = [await aggregate_rate(runs, cfg.scaling_calls_per_run, cfg.scaling_sleep_s) for _ in range(cfg.scaling_rounds)]
    finally:
        for o in runs:
            await close_run(o)
    return rates, len(used)


async def run(ctx: BenchContext) -> MeasureResult:
    cfg = ctx.config
    levels = sorted(cfg.scaling_nodes)
    ctx.step("starting a local Cluster")
    await ctx.reset_skills()  # the shared run and the raw subagents belong to the session that ends here
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "object_store_memory": _OBJECT_STORE_BYTES,
                                                              "include_dashboard": False})
    rates: list[list[float]] = []
    spread: list[int] = []
    try:
        ray.init(address=cluster.address, namespace="soloist-bench", log_to_driver=False)
        for level in levels:

            def grow(level: int = level) -> None:
                while len(cluster.list_all_nodes()) < level:
                    cluster.add_node(num_cpus=1, object_store_memory=_OBJECT_STORE_BYTES)
                cluster.wait_for_nodes()

            ctx.step(f"{level} node(s)")
            rate, used = await _at_size(ctx, level, grow)
            rates.append(rate)
            spread.append(used)
    finally:
        ray.shutdown()
        cluster.shutdown()
    params = {"runs": cfg.scaling_node_runs, "cap_per_run": 4, "replicas": cfg.scaling_node_replicas, "calls_per_run": cfg.scaling_calls_per_run,
              "sleep_s": cfg.scaling_sleep_s, "machine_cores": os.cpu_count() or 1}
    figures = [
        Figure(measure=NAME, name=f"{level} node(s)", values=rate, baselines=rates[0],
               baseline_name=f"{levels[0]} node(s), earlier rounds (the cluster grows)",
               unit="handoffs/s", better="higher", params={**params, "nodes": level, "nodes_used_by_subagents": used})
        for level, rate, used in zip(levels, rates, spread)
    ]
    medians = [f.value for f in figures]
    # Ideal: the workload does not grow with nodes, so every size should keep the first one's rate.
    notes = [
        saturation_note(levels, medians, [medians[0]] * len(levels), "nodes"),
        f"subagent replicas landed on {', '.join(map(str, spread))} node(s); all nodes share this machine's {os.cpu_count()} cores",
    ]
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)
