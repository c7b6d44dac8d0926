"""(5) Peer: the same fan-outs in LangGraph (Send API, ``max_concurrency=4``), same run.

LangGraph runs a fan-out inside this process (asyncio tasks; sync nodes in threads that
share one GIL), so it has no IPC to pay; soloist runs each call in a subagent actor (its own
process) under a cluster-wide cap. Three workloads, each interleaved round by round: the
sleeping fan-out of measure 4 (overhead should vanish behind the sleeps), a no-op fan-out
(overhead is all there is), and a CPU-bound fan-out (pure-Python work: what Ray is for).
Optional: without the ``langgraph`` package (the ``bench`` extra) the measure is skipped.
"""

from __future__ import annotations

import asyncio
import importlib.util
import operator
import os
from importlib.metadata import version
from typing import Annotated, Any, TypedDict

from actors import Call
from benchmarks._harness import BenchContext, BurnIn, BurnOut, NoopOut, SleepIn, SleepOut, burn, calibrate_burn, interleaved
from benchmarks.parallel_efficiency import CAP, fanout_run, ideal_seconds, warm_fanout
from benchmarks.results import Figure, MeasureResult

NAME = "peer_langgraph"
TITLE = "Peer: the same fan-outs in LangGraph (Send API, max_concurrency=4): sleeping, no-op, CPU-bound"
SLEEP_TARGET = 1.0  # no slower than LangGraph on the sleeping fan-out
CPU_TARGET = 1.8  # CPU-bound fan-out at least 1.8x LangGraph's throughput


def steps(ctx: BenchContext) -> int:
    return 4


class _FanState(TypedDict):
    calls: int
    sleep_s: float
    iterations: int
    done: Annotated[list[int], operator.add]


class _Item(TypedDict):
    index: int
    sleep_s: float
    iterations: int


def build_graph() -> Any:
    """START -> Send one ``work`` (async: sleep or nothing) or ``burn`` (sync: CPU) per call -> END."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    async def work(item: _Item) -> dict[str, list[int]]:
        if item["sleep_s"] > 0:
            await asyncio.sleep(item["sleep_s"])
        return {"done": [item["index"]]}

    def cpu(item: _Item) -> dict[str, list[int]]:
        burn(BurnIn(iterations=item["iterations"]))
        return {"done": [item["index"]]}

    def fan_out(state: _FanState) -> list[Any]:  # list[Send]; LangGraph reads this hint at runtime
        node = "cpu" if state["iterations"] else "work"
        return [Send(node, {"index": i, "sleep_s": state["sleep_s"], "iterations": state["iterations"]})
                for i in range(state["calls"])]

    graph = StateGraph(_FanState)
    graph.add_node("work", work)
    graph.add_node("cpu", cpu)
    graph.add_conditional_edges(START, fan_out, ["work", "cpu"])
    graph.add_edge("work", END)
    graph.add_edge("cpu", END)
    return graph.compile()


def _langgraph(graph: Any, calls: int, sleep_s: float = 0.0, iterations: int = 0) -> Any:
    async def once() -> None:
        out = await graph.ainvoke({"calls": calls, "sleep_s": sleep_s, "iterations": iterations, "done": []},
                                  config={"max_concurrency": CAP})
        if len(out["done"]) != calls:
            raise RuntimeError(f"LangGraph ran {len(out['done'])} of {calls} fan-out items")

    return once


async def run(ctx: BenchContext) -> MeasureResult:
    if importlib.util.find_spec("langgraph") is None:
        return MeasureResult(name=NAME, title=TITLE, skipped="langgraph is not installed; pip install 'soloist[bench]' to compare")
    cfg = ctx.config
    graph = build_graph()
    params: dict[str, float | int | str] = {"cap": CAP, "langgraph": version("langgraph")}
    ideal = ideal_seconds(cfg.fanout_calls, cfg.fanout_sleep_s)

    # One warm run serves the three fan-outs (each warms its own skill's pool first).
    async with fanout_run(ctx) as orch:
        ctx.step("sleeping fan-out")
        once = await warm_fanout(orch, [Call("sleep", SleepIn(seconds=cfg.fanout_sleep_s))] * cfg.fanout_calls, SleepOut)
        ours_sleep, lg_sleep = await interleaved(once, _langgraph(graph, cfg.fanout_calls, cfg.fanout_sleep_s), cfg.rounds)

        ctx.step("no-op fan-out")
        n = cfg.parallel_calls
        once = await warm_fanout(orch, [Call("noop")] * n, NoopOut)
        ours_noop, lg_noop = await interleaved(once, _langgraph(graph, n), cfg.rounds)

        ctx.step("calibrating the CPU-bound skill")
        iterations = calibrate_burn(cfg.cpu_seconds)
        ctx.step("CPU-bound fan-out")
        m = cfg.cpu_calls
        once = await warm_fanout(orch, [Call("burn", BurnIn(iterations=iterations))] * m, BurnOut)
        ours_cpu, lg_cpu = await interleaved(once, _langgraph(graph, m, iterations=iterations), cfg.rounds)

    sleep_params = {**params, "calls": cfg.fanout_calls, "sleep_s": cfg.fanout_sleep_s}
    cpu_params = {**params, "calls": m, "cpu_s_per_call": cfg.cpu_seconds, "iterations": iterations}
    figures = [
        Figure(measure=NAME, name="LangGraph sleeping fan-out wall time vs ideal", values=lg_sleep, baselines=[ideal] * len(lg_sleep),
               baseline_name=f"ideal ({ideal:g} s)", unit="s", better="lower", params=sleep_params),
        Figure(measure=NAME, name="soloist vs LangGraph, sleeping fan-out", values=ours_sleep, baselines=lg_sleep,
               baseline_name="LangGraph Send fan-out, max_concurrency=4", unit="s", better="lower", target=SLEEP_TARGET,
               params=sleep_params),
        Figure(measure=NAME, name="soloist vs LangGraph, no-op fan-out", values=[n / s for s in ours_noop],
               baselines=[n / s for s in lg_noop], baseline_name="LangGraph Send fan-out, max_concurrency=4", unit="calls/s",
               better="higher", params={**params, "calls": n}),
        Figure(measure=NAME, name="soloist vs LangGraph, CPU-bound fan-out", values=[m / s for s in ours_cpu],
               baselines=[m / s for s in lg_cpu], baseline_name="LangGraph Send fan-out (sync node), max_concurrency=4",
               unit="calls/s", better="higher", target=CPU_TARGET, params=cpu_params),
    ]
    cores = os.cpu_count() or 1
    cpu_ideal = -(-m // min(CAP, cores)) * cfg.cpu_seconds
    notes = [
        f"LangGraph {version('langgraph')} runs every item in this process (sync nodes in threads sharing one GIL); "
        "soloist runs each in a subagent actor, one process per replica.",
        f"CPU-bound fan-out: {m} calls of ~{cfg.cpu_seconds * 1e3:.0f} ms pure-Python CPU ({iterations:,} iterations, calibrated "
        f"here); median wall soloist {sorted(ours_cpu)[len(ours_cpu) // 2]:.2f} s, LangGraph {sorted(lg_cpu)[len(lg_cpu) // 2]:.2f} s; "
        f"ideal on {cores} cores at cap {CAP}: {cpu_ideal:.2f} s (one GIL: {m * cfg.cpu_seconds:.2f} s).",
    ]
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)
