"""A budgeted semaphore scope on the real service: its configuration, its refusals, and a run whose
handoffs report their usage to the release of their lease (typed, through ``report_usage``).

The budget is counted from what the skill bodies write in a ledger from their own processes
(when each started and the tokens it reported), never from the service's statistics.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
import ray
from pydantic import BaseModel

from actors import Call, Orchestrator, SkillRegistry, WarmPermits, parallel_handoff
from cluster import ClusterSemaphore, SemaphoreConfigConflict
from cluster.semaphore import Budget, BudgetConfigError, TokenUsage, report_usage
from coordinators import AgentState
from tests._ledger import append_line
from tests._waits import eventually

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class Step(BaseModel):
    ledger: str
    tokens: int


class Done(BaseModel):
    tokens: int


def _scope() -> str:
    return f"budget-{uuid.uuid4().hex[:10]}"


async def test_a_scope_is_opened_again_only_with_its_budget() -> None:
    scope = _scope()
    sem = ClusterSemaphore(scope, budget=Budget(requests=5, window_s=2.0))
    try:
        assert (await sem.statistics()).budget is not None
        other = ClusterSemaphore(scope, budget=Budget(requests=6, window_s=2.0))
        with pytest.raises(SemaphoreConfigConflict, match="budget=Budget\\(requests=5"):
            await other.acquire()
        joined = await ClusterSemaphore.existing_async(scope)
        assert joined.budget == Budget(requests=5, window_s=2.0)
    finally:
        sem.destroy()


async def test_a_reservation_the_budget_can_never_grant_is_refused_at_once_naming_it() -> None:
    sem = ClusterSemaphore(_scope(), budget=Budget(tokens=50, window_s=1.0))
    try:
        with pytest.raises(BudgetConfigError, match="reserving 51 tokens can never be granted: the budget allows 50"):
            await sem.acquire(tokens=51)
        with pytest.raises(ValueError, match=r"acquire\(tokens=\.\.\.\) must be None or an int >= 0, got -1"):
            await sem.acquire(tokens=-1)
        assert (await sem.statistics()).waiting == 0
    finally:
        sem.destroy()


async def test_a_budgeted_lease_is_never_kept_warm_and_settles_with_the_usage_reported() -> None:
    sem = ClusterSemaphore(_scope(), budget=Budget(tokens=100, window_s=60.0, reserve_tokens=40))
    try:
        permits = WarmPermits(sem, linger=60.0)
        lease = await permits.take(4)
        permits.give_back(lease, reuse=True, used_tokens=7)  # reuse asked, but every grant must be charged
        stats = await eventually(sem.statistics, lambda s: s.held == 0, "the lease released")
        assert stats.budget is not None and stats.budget.tokens_in_window == 7 and permits.reused == 0
    finally:
        sem.destroy()


async def test_handoffs_of_a_run_on_a_budgeted_scope_report_their_usage_to_the_release(tmp_path: Path) -> None:
    """Each body reserves the scope's ``reserve_tokens`` (30) and reports 20 at release: at most
    100 tokens start in any 1 s window, counted from the bodies' own ledger lines."""
    budget = Budget(tokens=100, window_s=1.0, reserve_tokens=30)
    scope = _scope()
    opened = ClusterSemaphore(scope, budget=budget)
    skills = SkillRegistry(replicas=2)

    @skills.skill("model.step")
    async def step(inp: Step) -> Done:
        append_line(inp.ledger, f"{time.time()} {inp.tokens}")
        report_usage(TokenUsage(model="ledger-model", input_tokens=inp.tokens - 5, output_tokens=5))
        return Done(tokens=inp.tokens)

    ledger = str(tmp_path / "ledger")
    orch = Orchestrator(AgentState(), caller=skills, semaphore_scope=scope)
    try:
        results = await parallel_handoff(orch, [Call("model.step", Step(ledger=ledger, tokens=20)) for _ in range(20)],
                                         Done)
        stats = await opened.statistics()
    finally:
        await orch.close()
        opened.destroy()
    assert [r.error for r in results if r.error is not None] == []
    started = sorted((float(t), int(n)) for t, n in (line.split() for line in Path(ledger).read_text().splitlines()))
    assert len(started) == 20
    busiest = max(sum(n for t, n in started if s - budget.window_s < t <= s) for s, _ in started)
    assert busiest <= 100, busiest
    # Settled with what was reported: 20 tokens each, not the 30 reserved.
    assert stats.budget is not None and stats.budget.tokens_total == 20 * 20
    floor = budget.floor_s(requests=20, tokens=400)
    span = started[-1][0] - started[0][0]
    assert span >= floor, (span, floor)
    print(f"20 bodies, 400 tokens at 100/s: span {span:.2f}s, floor {floor:.2f}s; busiest window {busiest} tokens")


@ray.remote(num_cpus=0)
class _RunActor:
    """Stands for a run's orchestrator: the service only pings it."""

    def ping(self) -> bool:
        return True


async def _restarted() -> set[str]:
    try:
        return {s.name for s in await ClusterSemaphore.service_statistics() if s.restarted}
    except ray.exceptions.RayActorError:  # the killed incarnation, or the new one not up yet
        return set()


async def test_a_budgeted_scope_rebuilt_after_a_restart_by_a_run_joining_it_keeps_its_budget() -> None:
    """A run's join carries no budget; the restarted service takes the recorded one."""
    scope, budget = _scope(), Budget(requests=3, window_s=30.0)
    opened = ClusterSemaphore(scope, budget=budget)
    await opened.statistics()
    run = _RunActor.remote()
    name = ClusterSemaphore.service_name(scope)
    try:
        ray.kill(ray.get_actor(name, namespace="soloist"), no_restart=False)
        await eventually(_restarted, lambda names: name in names, f"service {name} restarted by Ray")
        joined = await asyncio.to_thread(ClusterSemaphore.join_run, scope, "run-after-restart", run)
        assert joined.budget == budget
        stats = await joined.statistics()
        assert stats.budget is not None and stats.budget.budget == budget
    finally:
        await ClusterSemaphore.leave_run(scope, "run-after-restart")
        opened.destroy()
        ray.kill(run)
