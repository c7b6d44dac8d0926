"""Cancelling a run while its handoffs are in flight ends it ``cancelled``, once, from what is
committed: a result committed in between is kept, never overwritten by a stale copy."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from actors import RUN_RECORD_KEY, Orchestrator, Run, SkillRegistry, read_record
from coordinators import AgentState, StateTransition, TransitionBatch
from tests._waits import HANG_GUARD_S, file_appears
from tests.actors.run_fixtures import EchoIn, EchoOut, Planner, Reviewer, Worker, mark

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


def _held_echo(release: str) -> SkillRegistry:
    """``echo`` that stays inside until ``release`` exists (each body marks that it entered)."""
    skills = SkillRegistry()

    @skills.skill("echo")
    def echo(inp: EchoIn) -> EchoOut:
        mark(inp.log, f"inside:{inp.text}")
        while not os.path.exists(release):
            time.sleep(0.005)
        return EchoOut(echoed=inp.text.upper())

    return skills


def _ends_the_run(batch: Any) -> bool:
    return any(t.data.get("key") == RUN_RECORD_KEY and t.data["value"].get("status") == "cancelled"
               for t in batch if isinstance(t, StateTransition))


async def test_a_run_cancelled_while_a_result_commits_ends_cancelled_from_what_is_committed(tmp_path: Path) -> None:
    log, release = tmp_path / "log", tmp_path / "release"
    orch = Orchestrator(AgentState(), caller=_held_echo(str(release)), store=str(tmp_path / "runs.sqlite"))
    handle = orch.delegate()
    real_apply = handle.apply_batch
    interfered: list[int] = []

    async def apply_batch(batch: Any, *, expected_version: int | None = None, request_id: str | None = None) -> int:
        # Right before the run's final commit, another write closes one of the calls still
        # pending (as the result of a call in flight commits, racing the cancellation).
        if _ends_the_run(batch) and not interfered:
            interfered.append(await real_apply(TransitionBatch().tool_result("call-a", {"echoed": "A"})))
        return await real_apply(batch, expected_version=expected_version, request_id=request_id)

    handle.apply_batch = apply_batch  # type: ignore[method-assign]  # the run's writes pass through this test
    run = Run(handle, [Planner(str(log)), Worker(str(log)), Reviewer(str(log))], first="planner")
    driving = asyncio.ensure_future(run.run("go"))
    try:
        for text in ("a", "b"):  # both calls are inside their skill bodies
            await _line_appears(log, f"inside:{text}")
        driving.cancel()
        outcome = await asyncio.wait_for(driving, HANG_GUARD_S)
        assert outcome.status == "cancelled" and interfered
        ctx = await orch.context()
        record = read_record(ctx)
        assert record is not None and record.status == "cancelled"
        assert not ctx.pending_tool_calls  # every call closed: b by the cancellation, a by the result
        results = {m.tool_call_id: m for m in ctx.messages if m.role == "tool"}
        assert set(results) == {"call-a", "call-b"}
        assert "cancelled" in str(results["call-b"].content) and "A" in str(results["call-a"].content)
    finally:
        release.touch()
        await orch.close()


async def _line_appears(path: Path, line: str) -> None:
    await file_appears(path)
    deadline = time.monotonic() + HANG_GUARD_S
    while line not in path.read_text().splitlines():
        assert time.monotonic() < deadline, f"{line!r} did not appear in {path}"
        await asyncio.sleep(0.02)
