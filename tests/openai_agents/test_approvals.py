"""A ``needs_approval`` tool makes the run wait durably on a soloist interrupt: the driver is
SIGKILLed while it waits, ``soloist approve`` answers from another process, and the run
resumed in a new process goes on without any earlier request reaching the server again; the
approved side effect happens once (counted at the server and in the tool's body)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from actors.openai_agents import SoloistRunner
from tests._waits import process_gone
from tests.openai_agents._agents import QUIET, factory, ledger_lines, publisher, script
from tests.openai_agents._server import CountingServer

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

REPO = Path(__file__).resolve().parents[2]
LABEL, RUN_ID = "approve-1", "post"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0", "COLUMNS": "300",
            "RAY_ADDRESS": ray.get_runtime_context().gcs_address}


def _soloist(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cluster.cli", *args], capture_output=True, text=True, timeout=300,
                          env=_env(), cwd=REPO)


async def test_an_approval_waits_across_a_killed_driver_and_soloist_approve_lets_the_run_go_on(tmp_path: Path) -> None:
    store, ledger = tmp_path / "runs.sqlite", tmp_path / "ledger.log"
    with CountingServer(script) as server:
        runner = SoloistRunner(store=str(store), model_factory=factory(server.base_url))
        with (tmp_path / "driver.stderr").open("w") as stderr:
            driver = subprocess.Popen(
                [sys.executable, str(REPO / "tests" / "openai_agents" / "_crash_driver.py"),
                 ray.get_runtime_context().gcs_address, str(store), server.base_url, str(ledger), "publisher", LABEL,
                 RUN_ID], stdout=subprocess.PIPE, stderr=stderr, text=True, env=_env(), cwd=tmp_path)
        try:
            assert driver.stdout is not None
            line = driver.stdout.readline()  # the event: the run stopped on the call waiting for approval
            assert line.strip() == "WAITING 1", (tmp_path / "driver.stderr").read_text()[-3000:]
        finally:
            os.kill(driver.pid, signal.SIGKILL)
            driver.wait(timeout=60)
        await process_gone(driver.pid)
        assert server.count(LABEL, 0) == 1 and ledger_lines(ledger) == []

        # Taken up while the call still waits: replayed to the interruption, nothing sent.
        waiting = await runner.run(publisher(), LABEL, context=str(ledger), run_id=RUN_ID, run_config=QUIET)
        assert [item.tool_name for item in waiting.interruptions] == ["publish"]
        assert server.count(LABEL, 0) == 1

        run = runner.run_name(RUN_ID)
        listed = _soloist("approve", run, "--store", str(store))
        assert listed.returncode == 0, listed.stderr[-3000:]
        interrupt_id, kind, agent, question = listed.stdout.strip().split(maxsplit=3)
        assert (interrupt_id, kind, agent) == (f"{run}/i1", "turn", "openai-agents")
        assert json.loads(question) == {"agent": "publisher", "run_id": RUN_ID, "tool": "publish",
                                        "args": {"text": "post"}, "tool_call_id": f"{LABEL}-publish"}
        answered = _soloist("approve", run, interrupt_id, "--store", str(store))
        assert answered.returncode == 0, answered.stderr[-3000:]

        # Resumed: the committed request is answered from the journal, the approved call runs, the run ends.
        done = await runner.run(publisher(), LABEL, context=str(ledger), run_id=RUN_ID, run_config=QUIET)
        assert done.final_output == "done: published post"
        assert not done.interruptions
        assert [server.count(LABEL, step) for step in (0, 1)] == [1, 1], "an earlier request reached the server again"
        assert ledger_lines(ledger) == ["tool publish post"]

        again = await runner.run(publisher(), LABEL, context=str(ledger), run_id=RUN_ID, run_config=QUIET)
        assert again.final_output == done.final_output
        assert [server.count(LABEL, step) for step in (0, 1)] == [1, 1]
        assert ledger_lines(ledger) == ["tool publish post"], "the approved side effect ran twice"
    assert _soloist("approve", run, "--store", str(store)).stdout.strip() == f"run {run} has no open interrupts"


async def test_an_approval_given_the_sdks_way_continues_the_run_from_its_state_and_replays(tmp_path: Path) -> None:
    ledger, label = tmp_path / "ledger.log", "approve-2"
    with CountingServer(script) as server:
        runner = SoloistRunner(store=str(tmp_path / "runs.sqlite"), model_factory=factory(server.base_url))

        async def approved_run() -> str:
            first = await runner.run(publisher(), label, context=str(ledger), run_id="sdk", run_config=QUIET)
            assert [item.tool_name for item in first.interruptions] == ["publish"]
            state = first.to_state()
            state.approve(first.interruptions[0])
            done = await runner.run(publisher(), state, run_id="sdk", run_config=QUIET)
            return str(done.final_output)

        assert await approved_run() == "done: published post"
        assert [server.count(label, step) for step in (0, 1)] == [1, 1]
        assert ledger_lines(ledger) == ["tool publish post"]
        # The same again, as a restarted driver would: every step answered from the journal.
        assert await approved_run() == "done: published post"
        assert [server.count(label, step) for step in (0, 1)] == [1, 1], "a committed request reached the server again"
        assert ledger_lines(ledger) == ["tool publish post"], "the approved side effect ran twice"
