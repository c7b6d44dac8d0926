"""(5) Peer: the same fan-out in LangGraph (Send API, ``max_concurrency=4``), same run.

LangGraph runs the fan-out inside this process (asyncio tasks, no Ray, no other process),
so it has no IPC to pay; soloist runs each call in a subagent actor under a cluster-wide
cap. Two workloads: the sleeping fan-out of measure 4 (where overhead should vanish behind
the sleeps) and a no-op fan-out (where overhead is all there is). Optional: without the
``langgraph`` package (the ``bench`` extra) the measure is skipped with a note.
"""

from __future__ import annotations

import asyncio
import importlib.util
import operator
from typing import Annotated, Any, TypedDict

from actors import Call, Orchestrator, parallel_handoff
from benchmarks._harness import BenchContext, Counter, NoopOut, best, close_run, run_name
from benchmarks.parallel_efficiency import CAP, ideal_seconds, soloist_fanout
from benchmarks.results import Figure, MeasureResult

NAME = "peer_langgraph"
TITLE = "Peer: the same fan-out in LangGraph (Send API, max_concurrency=4)"


def steps(ctx: BenchContext) -> int:
    return 4


class _FanState(TypedDict):
    calls: int
    sleep_s: float
    done: Annotated[list[int], operator.add]


class _Item(TypedDict):
    index: int
    sleep_s: float


def build_graph() -> Any:
    """START -> Send one ``work`` per call -> END; ``work`` sleeps ``sleep_s`` (0: no-op)."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    async def work(item: _Item) -> dict[str, list[int]]:
        if item["sleep_s"] > 0:
            await asyncio.sleep(item["sleep_s"])
        return {"done": [item["index"]]}

    def fan_out(state: _FanState) -> list[Any]:  # list[Send]; LangGraph reads this hint at runtime
        return [Send("work", {"index": i, "sleep_s": state["sleep_s"]}) for i in range(state["calls"])]

    graph = StateGraph(_FanState)
    graph.add_node("work", work)
    graph.add_conditional_edges(START, fan_out, ["work"])
    graph.add_edge("work", END)
    return graph.compile()


async def _langgraph_wall(graph: Any, calls: int, sleep_s: float, repeats: int) -> float:
    async def once() -> None:
        out = await graph.ainvoke({"calls": calls, "sleep_s": sleep_s, "done": []}, config={"max_concurrency": CAP})
        if len(out["done"]) != calls:
            raise RuntimeError(f"LangGraph ran {len(out['done'])} of {calls} fan-out items")

    return await best(once, repeats)


async def run(ctx: BenchContext) -> MeasureResult:
    if importlib.util.find_spec("langgraph") is None:
        return MeasureResult(name=NAME, title=TITLE, skipped="langgraph is not installed; pip install 'soloist[bench]' to compare")
    from importlib.metadata import version

    cfg = ctx.config
    graph = build_graph()
    ideal = ideal_seconds(cfg.fanout_calls, cfg.fanout_sleep_s)
    ctx.step("LangGraph sleeping fan-out")
    lg_sleep = await _langgraph_wall(graph, cfg.fanout_calls, cfg.fanout_sleep_s, cfg.repeats)
    ctx.step("soloist sleeping fan-out")
    ours_sleep = await soloist_fanout(ctx, cfg.repeats)

    ctx.step("LangGraph no-op fan-out")
    n = cfg.parallel_calls
    lg_noop = await _langgraph_wall(graph, n, 0.0, cfg.repeats)
    ctx.step("soloist no-op fan-out")
    orch = Orchestrator(Counter(), caller=ctx.skills, name=run_name("peer"))
    try:
        await parallel_handoff(orch, [Call("noop")] * CAP, NoopOut)
        ours_noop = await best(lambda: parallel_handoff(orch, [Call("noop")] * n, NoopOut), cfg.repeats)
    finally:
        await close_run(orch)
    params: dict[str, float | int | str] = {"cap": CAP, "langgraph": version("langgraph")}
    figures = [
        Figure(measure=NAME, name="LangGraph fan-out wall time vs ideal", value=lg_sleep, baseline=ideal,
               baseline_name=f"ideal ({ideal:g} s)", unit="s", better="lower",
               params={**params, "calls": cfg.fanout_calls, "sleep_s": cfg.fanout_sleep_s}),
        Figure(measure=NAME, name="soloist vs LangGraph, sleeping fan-out", value=ours_sleep, baseline=lg_sleep,
               baseline_name="LangGraph Send fan-out, max_concurrency=4", unit="s", better="lower",
               params={**params, "calls": cfg.fanout_calls, "sleep_s": cfg.fanout_sleep_s}),
        Figure(measure=NAME, name="soloist vs LangGraph, no-op fan-out", value=n / ours_noop, baseline=n / lg_noop,
               baseline_name="LangGraph Send fan-out, max_concurrency=4", unit="calls/s", better="higher",
               params={**params, "calls": n}),
    ]
    notes = [
        f"LangGraph {version('langgraph')} runs every item in this process; soloist runs each in a subagent actor.",
        f"parallel efficiency (ideal / wall): soloist {ideal / ours_sleep:.3f}, LangGraph {ideal / lg_sleep:.3f}",
    ]
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)
