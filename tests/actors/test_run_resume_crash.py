"""Resume after a crash while waiting for approval: nothing that completed runs again.

Every coordinator and skill appends a line to a file each time it really runs; the counts
after the resumed run prove no turn and no handoff before the interrupt was repeated.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray

from actors import Orchestrator, Run, answer_interrupt, open_interrupts
from coordinators import AgentState
from tests._waits import eventually
from tests.actors.run_fixtures import counts, skill_registry, three

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

REPO = Path(__file__).resolve().parents[2]
BEFORE_THE_INTERRUPT = {"coordinator:planner": 1}
ALL_DONE = {"coordinator:planner": 1, "coordinator:worker": 1, "coordinator:reviewer": 1,
            "skill:echo:a": 1, "skill:echo:b": 1}


def _start_waiting_driver(store: Path, name: str, log: Path, tmp: Path) -> tuple[subprocess.Popen[str], list[str]]:
    """The driver, joined to this test's Ray (not an embedded Ray of its own: a second Ray
    on a machine whose cores are busy took minutes to start), once its run is waiting."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    address = ray.get_runtime_context().gcs_address
    errors = tmp / "driver.stderr"
    with errors.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "actors" / "_run_waiting_driver.py"), address, str(store), name, str(log)],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
        )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()  # blocks until the run is waiting (or the driver died)
    assert line and line[0] == "WAITING", f"the driver did not reach the waiting state: {line}; its stderr ends:\n{errors.read_text()[-3000:]}"
    return proc, line[1:]


def _kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the driver; its (non-detached) run's actor dies with it, as Ray decides."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


async def test_resume_after_sigkill_of_the_driver_while_waiting_runs_nothing_twice(tmp_path: Path) -> None:
    store, log = tmp_path / "runs.sqlite", tmp_path / "effects.log"
    proc, ids = _start_waiting_driver(store, "resume-after-driver-kill", log, tmp_path)
    _kill(proc)
    assert counts(log) == BEFORE_THE_INTERRUPT and len(ids) == 2
    # Ray ends a dead driver's actors; attach once the run's actor is gone (the store has it).
    await eventually(lambda: asyncio.to_thread(Orchestrator.list_live), lambda live: "resume-after-driver-kill" not in live,
                     "the dead driver's run actor to end")
    started = time.perf_counter()
    orch = Orchestrator.attach("resume-after-driver-kill", store=str(store))
    try:
        assert [i.id for i in await open_interrupts(orch)] == ids
        for interrupt_id in ids:
            await answer_interrupt(orch, interrupt_id, approve=True)
        outcome = await Run(orch, three(str(log)), first="planner", fallback="reviewer").resume()
        resumed_in = time.perf_counter() - started
        assert outcome.status == "complete", outcome.reason
        assert counts(log) == ALL_DONE
        print(f"resume after driver SIGKILL: attach + answer x2 + resume to completion in {resumed_in:.2f} s")
    finally:
        await orch.close()


async def test_resume_after_sigkill_of_the_orchestrator_actor_while_waiting_runs_nothing_twice(tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    name = "resume-after-actor-kill"
    orch = Orchestrator(AgentState(), caller=skill_registry(), name=name, store=str(tmp_path / "runs.sqlite"))
    try:
        waiting = await Run(orch, three(str(log), approve="each"), first="planner", fallback="reviewer").run("go")
        assert waiting.status == "waiting" and counts(log) == BEFORE_THE_INTERRUPT
        before = (await orch.snapshot()).model_dump_json()
        killed = (await orch.statistics()).pid
        os.kill(killed, signal.SIGKILL)
        # The actor restarts from its store; the same handle keeps working through the restart.
        assert (await orch.snapshot()).model_dump_json() == before
        stats = await orch.statistics()
        assert stats.restarted and stats.pid != killed
        for interrupt in await open_interrupts(orch):
            await answer_interrupt(orch, interrupt.id, approve=True)
        outcome = await Run(orch, three(str(log)), first="planner", fallback="reviewer").resume()
        assert outcome.status == "complete", outcome.reason
        assert counts(log) == ALL_DONE
    finally:
        await orch.close()
