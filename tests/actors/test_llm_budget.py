"""A model endpoint as one scope shared by every run: its cap of four and its tokens-per-window
budget hold across the cluster, waiting rather than failing, and across a restart of the
semaphore service.

Counted at the server the calls reach (``ChatServer`` with a ``TokenLimit``: it refuses with
429 anything over its own tokens-per-window count, and counts the requests in flight), never
by the runtime's own counters; the metrics are read from the collector (what ``/metrics``
serves) and compared with what the server served.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
import ray

from actors import Call, ChatOutput, LlmCaller, LlmConfig, Orchestrator, parallel_handoff
from rich.console import Console

from cluster import ClusterSemaphore
from cluster.cli import collect_status, render_status
from cluster.metrics import MetricsDelta, llm_token_totals, read_totals, run_token_totals
from cluster.semaphore import Budget, endpoint_scope
from coordinators import AgentState
from tests._waits import eventually
from tests.actors.servers.chat_server import ChatServer, TokenLimit

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session"), pytest.mark.timeout(600)]

MAX_TOKENS = 8


def _chat(i: int) -> Call:
    text = f"conversation {i:03d}: answer in a word, please"
    return Call("llm.chat", {"messages": [{"role": "user", "content": text}], "max_tokens": MAX_TOKENS})


async def _totals() -> MetricsDelta:
    return await asyncio.to_thread(read_totals)


async def _restarted() -> set[str]:
    """The semaphore services that answer and say Ray restarted them."""
    try:
        return {s.name for s in await ClusterSemaphore.service_statistics() if s.restarted}
    except ray.exceptions.RayActorError:  # the killed incarnation, or the new one not up yet
        return set()


def _count(totals: MetricsDelta, name: str, labels: tuple[str, ...]) -> float:
    return totals.counters.get((name, labels), 0.0)


async def test_conversations_of_many_runs_share_the_endpoints_cap_and_token_budget_without_a_refusal() -> None:
    budget = Budget(tokens=90, window_s=1.0)
    model = f"m-{uuid.uuid4().hex[:8]}"
    with ChatServer(limit=TokenLimit(tokens=budget.tokens or 0, window_s=budget.window_s)) as server:
        config = LlmConfig.from_env(base_url=server.base_url, model=model, budget=budget)
        llm = LlmCaller(config, replicas=2)
        runs = [Orchestrator(AgentState(), caller=llm, name=f"budget-{model}-{r}") for r in range(3)]  # named: live in status
        names = [orch.name for orch in runs]
        try:
            started = time.monotonic()
            batches = await asyncio.gather(*(
                parallel_handoff(orch, [_chat(r * 8 + i) for i in range(8)], ChatOutput) for r, orch in enumerate(runs)))
            wall = time.monotonic() - started

            # What the server served is what the metrics count: per model, and per run and agent.
            def counted(t: MetricsDelta) -> bool:
                by_model = llm_token_totals(t).get(model)
                by_run = sum(v.total_tokens for (run, _), v in run_token_totals(t).items() if run in names)
                return by_model is not None and by_model.total_tokens == server.tokens_served == by_run

            totals = await eventually(_totals, counted, "token metrics match the server's count")
            status = await asyncio.to_thread(collect_status, store=None, address="auto", limit=10_000)
        finally:
            for orch in runs:
                await orch.close()
        errors = [r.error for batch in batches for r in batch if r.error is not None]
        assert errors == []
        assert server.refused == 0, f"{server.refused} requests were refused by the server's own limit"
        assert len(server.served_at) == 24
        assert server.max_in_flight <= 4, server.max_in_flight
        floor = budget.floor_s(requests=24, tokens=server.tokens_served)
        span = server.served_at[-1] - server.served_at[0]
        assert span >= floor and wall >= floor, (span, wall, floor)
        print(f"24 requests, {server.tokens_served} tokens at {budget.tokens}/{budget.window_s:g}s: wall {wall:.2f}s, "
              f"span at the server {span:.2f}s, floor {floor:.2f}s ({span / floor:.2f}x); peak in flight "
              f"{server.max_in_flight}")

        assert _count(totals, "soloist_llm_requests_total", (model, "ok")) == 24
        per_run = {run: v.total_tokens for (run, skill), v in run_token_totals(totals).items() if run in names}
        assert set(per_run) == set(names) and all(v > 0 for v in per_run.values())
        counts, waited = totals.histograms[("soloist_budget_wait_seconds", (endpoint_scope(server.base_url, model),))]
        assert sum(counts) == 24 and waited > 0

        # `soloist status` on the live cluster: each run's tokens by agent, and the model's.
        rows = {row.name: row for row in status.runs if row.name in names}
        assert {name: sum(t.total_tokens for t in rows[name].tokens.values()) for name in rows} == per_run
        assert status.models[model].total_tokens == server.tokens_served
        console = Console(record=True, width=200)
        render_status(console, status)
        text = console.export_text()
        assert "model tokens" in text and model in text and f"llm.chat {rows[names[0]].tokens['llm.chat'].input_tokens} in" in text



async def test_runs_sharing_an_endpoint_hold_four_requests_in_flight_at_the_server_together() -> None:
    """Three runs, each with its own cap of four, 24 conversations: the endpoint's scope holds
    them to four at the server, and four while saturated (held there until the test sees them)."""
    gate = threading.Event()
    model = f"m-{uuid.uuid4().hex[:8]}"
    with ChatServer(auto=True, gate=gate) as server:
        llm = LlmCaller(LlmConfig.from_env(base_url=server.base_url, model=model), replicas=2)
        runs = [Orchestrator(AgentState(), caller=llm) for _ in range(3)]
        try:
            batches = asyncio.gather(*(
                parallel_handoff(orch, [_chat(r * 8 + i) for i in range(8)], ChatOutput) for r, orch in enumerate(runs)))

            async def in_flight() -> int:
                return server.in_flight

            saturated = await eventually(in_flight, lambda n: n >= 4, "four requests in flight at the server")
            gate.set()
            results = await batches
        finally:
            gate.set()
            for orch in runs:
                await orch.close()
    assert [r.error for batch in results for r in batch if r.error is not None] == []
    assert len(server.served_at) == 24
    assert saturated == 4 and server.max_in_flight == 4, (saturated, server.max_in_flight)


async def test_a_restart_of_the_semaphore_service_does_not_forget_the_windows_consumption() -> None:
    """The window's charges outlive the service: after Ray restarts it, the requests that
    follow still wait for the first ones to leave the window; the server refuses none. (With
    an empty window after the restart, the second batch would go at once and the server,
    still counting the first, would refuse them.)"""
    budget = Budget(tokens=100, window_s=12.0)
    model = f"m-{uuid.uuid4().hex[:8]}"
    with ChatServer(limit=TokenLimit(tokens=100, window_s=budget.window_s)) as server:
        scope = endpoint_scope(server.base_url, model)
        # The first opener sets the scope's configuration: a 1 s TTL, so a restarted service
        # recovers for 1 s (not 10) before it grants again. The caller joins the scope as it is.
        opened = ClusterSemaphore(scope, ttl_s=1.0, budget=budget)
        await opened.statistics()
        orch = Orchestrator(AgentState(), caller=LlmCaller(LlmConfig.from_env(base_url=server.base_url, model=model)))
        try:
            first = await parallel_handoff(orch, [_chat(i) for i in range(5)], ChatOutput)
            first_done = time.monotonic()
            served_first = len(server.served_at)
            name = ClusterSemaphore.service_name(scope)
            ray.kill(ray.get_actor(name, namespace="soloist"), no_restart=False)
            await eventually(_restarted, lambda names: name in names, f"service {name} restarted by Ray")
            back = time.monotonic()
            rebuilt = await opened.statistics()
            second = await parallel_handoff(orch, [_chat(i) for i in range(5, 10)], ChatOutput)
        finally:
            await orch.close()
            opened.destroy()
    assert [r.error for r in first + second if r.error is not None] == []
    assert served_first == 5 and len(server.served_at) == 10
    assert server.refused == 0, f"{server.refused} requests were refused by the server's own limit after the restart"
    # The proof is not vacuous: the service was back while the first batch still filled the window.
    assert back - first_done < budget.window_s - 1.0, f"the restart took {back - first_done:.1f}s"
    assert rebuilt.budget is not None and rebuilt.budget.tokens_in_window >= 5 * 19 - 5
    gap = server.served_at[5] - server.served_at[4]
    print(f"restart after {back - first_done:.2f}s; the second batch reached the server {gap:.2f}s after the first "
          f"(window {budget.window_s:g}s)")
