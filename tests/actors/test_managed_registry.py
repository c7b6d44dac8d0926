"""Managed agents inside a run: persisted before published, in order, restored lazily.

Drives the orchestrator's registry through the runtime paths that feed it: subagent pools
(replica created), the run loop (coordinators running/idle/closed), and a crash restart
(records restored without handles, actors re-created on first use, once).
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from actors import Orchestrator, SkillRegistry, handoff, parallel_handoff
from actors import AgentNotFound, coordinator_config
from actors import AgentConfig, IllegalLifecycleTransition
from actors import Run, create_coordinator_actor
from actors import MAX_TRACKED_RUNS, pool_for, pool_status
from cluster.cli import collect_status
from cluster.storage import SqliteStore
from coordinators import AgentState, ContextSnapshot, CoordinatorResult, TransitionBatch
from tests._waits import HANG_GUARD_S, eventually

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class EchoIn(BaseModel):
    text: str


class Finisher:
    """One turn: write a marker and stop the run."""

    name = "finisher"

    async def process(self, snapshot: ContextSnapshot, message: str) -> CoordinatorResult:
        return CoordinatorResult(TransitionBatch().update_state("seen", message), should_continue=False)


async def _agent_events(orch: Orchestrator, count: int, since: int = 0) -> list[dict[str, Any]]:
    """The next ``count`` agent_state payloads published by the run, in order."""
    out: list[dict[str, Any]] = []

    async def collect() -> None:
        async for change in orch.subscribe(since=since):
            if change.kind == "agent_state":
                assert change.agent is not None
                out.append(change.agent)
                if len(out) == count:
                    return

    await asyncio.wait_for(collect(), timeout=HANG_GUARD_S)
    return out


async def _listening(orch: Orchestrator, count: int) -> asyncio.Future[list[dict[str, Any]]]:
    """The next ``count`` agent_state payloads, from a write made now: the subscription
    replays from that write however late its first poll runs (one from the current version
    starts at that poll, and misses what was published before it)."""
    version = await orch.apply(lambda state: setattr(state, "conversation_stage", "listening"))
    return asyncio.ensure_future(_agent_events(orch, count, since=version - 1))


async def _kill_worker(orch: Orchestrator) -> None:
    os.kill((await orch.statistics()).pid, signal.SIGKILL)


async def test_agent_state_events_follow_store_writes_in_change_order(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    orch = Orchestrator(AgentState(), name="order", store=path)
    store = SqliteStore(path)
    try:
        handle = create_coordinator_actor(Finisher())
        config = coordinator_config(Finisher())
        listener = await _listening(orch, 6)
        await orch.agent_created("coordinator:a", "coordinator", config, handle)  # initializing, idle
        await orch.agent_changed("coordinator:a", "running")
        await orch.agent_created("coordinator:b", "coordinator", config, handle)  # initializing, idle
        await orch.agent_changed("coordinator:a", "idle")
        events = await listener
        assert [(e["agent_id"], e["lifecycle"]) for e in events] == [
            ("coordinator:a", "initializing"), ("coordinator:a", "idle"), ("coordinator:a", "running"),
            ("coordinator:b", "initializing"), ("coordinator:b", "idle"), ("coordinator:a", "idle"),
        ]
        assert all("handle" not in e and e["run"] == "order" for e in events)
        # Every published record was durable no later than its event.
        rows = {row.agent_id: row for row in store.list_agents("order")}
        assert rows["coordinator:a"].record["lifecycle"] == "idle" and rows["coordinator:b"].record["lifecycle"] == "idle"
        assert rows["coordinator:a"].seq > rows["coordinator:b"].seq  # written last, as published last
        for event in events:
            assert rows[event["agent_id"]].record["updated_at"] >= event["updated_at"]
    finally:
        store.close()
        await orch.close()


async def test_an_illegal_lifecycle_change_is_refused_naming_both_states(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    orch = Orchestrator(AgentState(), name="illegal", store=path)
    try:
        await orch.agent_created("coordinator:x", "coordinator", AgentConfig(), create_coordinator_actor(Finisher()))
        await orch.agent_changed("coordinator:x", "closed")
        with pytest.raises(IllegalLifecycleTransition, match="from 'closed' to 'running'"):
            await orch.agent_changed("coordinator:x", "running")
        assert [a["lifecycle"] for a in await orch.agents()] == ["closed"]
    finally:
        await orch.close()


async def test_close_records_every_agent_as_closed_and_status_shows_them(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    orch = Orchestrator(AgentState(), name="closing", store=path)
    await orch.agent_created("coordinator:x", "coordinator", AgentConfig(), create_coordinator_actor(Finisher()))
    await orch.close()
    report = collect_status(store=str(path), address=None)
    (run,) = report.runs
    assert [(a["agent_id"], a["kind"], a["lifecycle"]) for a in run.agents] == [("coordinator:x", "coordinator", "closed")]


async def test_subagent_pool_replicas_are_recorded_when_created(tmp_path: Path) -> None:
    skills = SkillRegistry()

    @skills.skill("managed_echo")
    def echo(inp: EchoIn) -> EchoIn:
        return inp

    orch = Orchestrator(AgentState(), name="pooled", caller=skills, store=tmp_path / "s.db")
    try:
        replicas = pool_for(skills, "managed_echo").statistics().replicas
        listener = await _listening(orch, 2 * replicas)
        # Every replica the pool creates is recorded (the pool at its max, started ahead);
        # calls in flight together then go to different replicas.
        await pool_for(skills, "managed_echo").start_all()
        together = await parallel_handoff(orch, [_call("managed_echo", f"hi {i}") for i in range(replicas)], EchoIn)
        assert [r.output.text for r in together] == [f"hi {i}" for i in range(replicas)]
        events = await listener
        by_agent: dict[str, list[str]] = {}
        for e in events:
            by_agent.setdefault(e["agent_id"], []).append(e["lifecycle"])
        assert sorted(a.rsplit(":", 1)[1] for a in by_agent) == [str(i) for i in range(replicas)]
        assert all(lifecycles == ["initializing", "idle"] for lifecycles in by_agent.values())
        assert {e["kind"] for e in events} == {"subagent"} and {e["config"]["skill"] for e in events} == {"managed_echo"}
        assert all(e["live"] for e in events if e["lifecycle"] == "idle")
        before = await orch.agents()
        # Further handoffs reuse the replicas: nothing new is recorded (off the per-call path).
        for i in range(2 * replicas):
            await handoff(orch, _call("managed_echo", "again"), EchoIn)
        assert await orch.agents() == before and len(before) == replicas
    finally:
        await orch.close()


def _call(skill: str, text: str) -> Any:
    from actors import Call

    return Call(skill, EchoIn(text=text))


async def test_a_run_records_its_coordinators_running_idle_then_closed(tmp_path: Path) -> None:
    orch = Orchestrator(AgentState(), name="looped", store=tmp_path / "s.db")
    try:
        listener = await _listening(orch, 5)
        outcome = await Run(orch, [Finisher()], first="finisher").run("go")
        assert outcome.status in ("complete", "stopped")
        events = await listener
        assert [e["lifecycle"] for e in events] == ["initializing", "idle", "running", "idle", "closed"]
        assert {e["agent_id"] for e in events} == {"coordinator:finisher"}
    finally:
        await orch.close()


async def test_after_a_crash_agents_are_recreated_lazily_once_from_their_records(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    orch = Orchestrator(AgentState(), name="lazy", store=path)
    try:
        config = coordinator_config(Finisher())
        await orch.agent_created("coordinator:f", "coordinator", config, create_coordinator_actor(Finisher()))
        await _kill_worker(orch)
        await orch.version()  # waits out the restart
        (restored,) = await orch.agents()
        assert restored["lifecycle"] == "idle" and restored["live"] is False  # record only, no actor yet
        assert (await orch.statistics()).restarted
        listener = await _listening(orch, 2)
        first, second = await asyncio.gather(orch.agent_handle("coordinator:f"), orch.agent_handle("coordinator:f"))
        assert first == second  # two concurrent first uses, one actor
        assert [e["lifecycle"] for e in await listener] == ["initializing", "idle"]
        (live,) = await orch.agents()
        assert live["live"] is True and live["restarts"] == 1
        ctx = await orch.context()
        result = await first.process.remote(ctx, "hello")
        assert isinstance(result, CoordinatorResult)
        assert await orch.agent_handle("coordinator:f") == first  # no third creation
        with pytest.raises(AgentNotFound, match="no agent 'coordinator:nope'"):
            await orch.agent_handle("coordinator:nope")
    finally:
        await orch.close()


async def test_a_pool_shared_by_many_runs_records_its_replicas_in_the_first_runs_only() -> None:
    skills = SkillRegistry(replicas=1)

    @skills.skill("shared_echo")
    def echo(inp: EchoIn) -> EchoIn:
        return inp

    runs = [Orchestrator(AgentState(), name=f"sharing-{i}", caller=skills) for i in range(MAX_TRACKED_RUNS + 2)]
    try:
        await pool_for(skills, "shared_echo").start_all()  # one replica, reported to the tracked runs
        for orch in runs[:MAX_TRACKED_RUNS]:
            await eventually(orch.agents, lambda agents: len(agents) == 1, f"{orch.name} to record the replica")
        # Every report was sent before the last tracked run had it: the others were sent none.
        assert [await orch.agents() for orch in runs[MAX_TRACKED_RUNS:]] == [[], []]
        assert [p.replicas for p in await pool_status() if p.skill == "shared_echo"] == [1]  # the pool, seen once
    finally:
        await asyncio.gather(*(orch.close() for orch in runs))
