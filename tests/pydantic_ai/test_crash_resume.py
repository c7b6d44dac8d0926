"""A durable pydantic-ai agent SIGKILLed mid-run continues from its last committed step.

A driver process runs the agent on a SQLite store; the model holds its request ``HOLD_AT``
(the ledger line of that request is the event the test waits on: every step before it is
committed by then), and the test SIGKILLs the driver. A second driver process runs the same
run id again: it answers with the same output as an uncrashed run, no model request whose
response was committed reaches the model again (only the one in flight at the kill, counted)
and each side-effect tool body ran exactly once. The counts are the ledger's lines, written
by the model's function in its replica and by the tool body.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import ray

from actors import Orchestrator
from actors.pydantic_ai import AgentJournal, SoloistAgent
from tests._waits import eventually, process_gone
from tests.pydantic_ai._agents import MODEL_REQUESTS, build_agent, ledger_lines

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

REPO = Path(__file__).resolve().parents[2]
HOLD_AT = 2  # killed while model request 2 is in flight: 2 responses and the tool calls answering them are committed
RUN_ID = "crash-1"


def _driver(tmp: Path, store: Path, ledger: Path, release: Path, hold_at: str, label: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    address = ray.get_runtime_context().gcs_address
    with (tmp / f"{label}.stderr").open("w") as stderr:
        return subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "pydantic_ai" / "_crash_driver.py"), address, str(store), str(ledger),
             str(release), hold_at, RUN_ID],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=tmp,
        )


async def _committed(name: str) -> list[str]:
    watcher = Orchestrator.attach(name)  # read-only: the driver owns the run
    try:
        state = await watcher.snapshot()
    finally:
        await watcher.close()
    assert isinstance(state, AgentJournal)
    return [step.key for step in state.runs.get(f"scribe/{RUN_ID}", [])]


async def test_a_killed_agent_run_resumes_without_requesting_or_running_a_committed_step_again(tmp_path: Path) -> None:
    store, ledger, release = tmp_path / "runs.sqlite", tmp_path / "ledger.log", tmp_path / "release"
    plain_ledger = tmp_path / "plain.log"
    expected = (await build_agent(plain_ledger).run("go", deps=str(plain_ledger))).output
    name = SoloistAgent(build_agent(ledger), store=str(store)).run_name(RUN_ID)

    first = _driver(tmp_path, store, ledger, release, str(HOLD_AT), "first")
    try:
        # The event: the model subagent received request HOLD_AT (it now holds it).
        await eventually(lambda: asyncio.to_thread(ledger_lines, ledger), lambda lines: f"model {HOLD_AT}" in lines,
                         f"model request {HOLD_AT} to reach the model subagent")
        committed = await _committed(name)
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    await process_gone(first.pid)
    assert [k for k in committed if k.startswith("model:")] == [f"model:{n}" for n in range(HOLD_AT)]
    assert len([k for k in committed if k.startswith("tool:")]) == 3, committed  # add + record, then add
    await eventually(lambda: asyncio.to_thread(Orchestrator.list_live), lambda live: name not in live,
                     "the killed driver's run to end")
    release.touch()  # a held replica that outlived its driver answers a driver that is gone
    before = Counter(ledger_lines(ledger))

    second = _driver(tmp_path, store, ledger, release, "-", "second")
    out, _ = second.communicate(timeout=600)
    assert second.returncode == 0, f"the resumed driver failed; its stderr ends:\n{(tmp_path / 'second.stderr').read_text()[-3000:]}"
    outputs = [json.loads(line.split(" ", 1)[1]) for line in out.splitlines() if line.startswith("OUTPUT ")]
    assert outputs == [expected], out

    seen = Counter(ledger_lines(ledger))
    for n in range(HOLD_AT):
        assert seen[f"model {n}"] == 1, f"model request {n}, committed before the kill, was sent again: {seen}"
    resent = seen[f"model {HOLD_AT}"] - 1
    assert resent <= 1, f"the request in flight at the kill was sent {resent} more times: {seen}"
    for n in range(HOLD_AT + 1, MODEL_REQUESTS):
        assert seen[f"model {n}"] == 1, seen
    assert seen["tool record first"] == 1 and seen["tool record second"] == 1, f"a side-effect tool ran twice: {seen}"
    assert before["tool record second"] == 0  # it ran in the resumed process, once
    print(f"resent in-flight model requests: {resent}")
