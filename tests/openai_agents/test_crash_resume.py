"""A durable OpenAI Agents SDK run SIGKILLed mid-conversation continues from its last
committed step.

A driver process runs the agent on a SQLite store against the test's counting server, which
holds the conversation's request ``HOLD_AT`` (its arrival is the event the test waits on:
every step before it is committed by then); the test SIGKILLs the driver. A second driver
process runs the same run id: it answers as a plain run does, no request whose response was
committed reaches the server again (the one in flight at the kill is counted: at most once
more), and each side-effect tool body ran exactly once (ledger lines from inside the tool).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from actors import Orchestrator
from actors.openai_agents import AgentJournal, SoloistRunner
from tests._waits import eventually, process_gone
from tests.openai_agents._agents import MODEL_REQUESTS, ledger_lines, script
from tests.openai_agents._server import CountingServer

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

REPO = Path(__file__).resolve().parents[2]
HOLD_AT = 2  # killed while request 2 is at the server: 2 responses and the 3 tool calls answering them are committed
LABEL, RUN_ID = "crash", "crash-1"


def _driver(tmp: Path, store: Path, base_url: str, ledger: Path, label: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    with (tmp / f"{label}.stderr").open("w") as stderr:
        return subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "openai_agents" / "_crash_driver.py"),
             ray.get_runtime_context().gcs_address, str(store), base_url, str(ledger), "scribe", LABEL, RUN_ID],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=tmp)


async def _committed(name: str) -> list[str]:
    watcher = Orchestrator.attach(name)  # read-only: the driver owns the run
    try:
        state = await watcher.snapshot()
    finally:
        await watcher.close()
    assert isinstance(state, AgentJournal)
    return [step.key for step in state.runs.get(f"openai-agents/{RUN_ID}", [])]


async def test_a_killed_run_resumes_without_sending_a_committed_request_or_running_a_tool_body_again(
        tmp_path: Path) -> None:
    store, ledger = tmp_path / "runs.sqlite", tmp_path / "ledger.log"
    name = SoloistRunner().run_name(RUN_ID)
    with CountingServer(script) as server:
        server.hold(lambda label, step: label == LABEL and step == HOLD_AT)
        first = _driver(tmp_path, store, server.base_url, ledger, "first")
        try:
            await eventually(lambda: asyncio.to_thread(server.count, LABEL, HOLD_AT), lambda n: n >= 1,
                             f"request {HOLD_AT} to reach the server")
            committed = await _committed(name)
        finally:
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=60)
        await process_gone(first.pid)
        assert [k for k in committed if k.startswith("model:")] == [f"model:{n}" for n in range(HOLD_AT)]
        assert len([k for k in committed if k.startswith("tool:")]) == 3, committed  # add + record, then add
        await eventually(lambda: asyncio.to_thread(Orchestrator.list_live), lambda live: name not in live,
                         "the killed driver's run to end")
        server.release()  # the held request, whose driver is gone, is answered to nobody
        assert ledger_lines(ledger) == ["tool record first"]

        second = _driver(tmp_path, store, server.base_url, ledger, "second")
        out, _ = second.communicate(timeout=600)
        assert second.returncode == 0, f"the resumed driver failed:\n{(tmp_path / 'second.stderr').read_text()[-3000:]}"
        outputs = [json.loads(line.split(" ", 1)[1]) for line in out.splitlines() if line.startswith("OUTPUT ")]
        assert outputs == ["done: 3; recorded first; 7; recorded second; 11"], out

        seen = {step: server.count(LABEL, step) for step in range(MODEL_REQUESTS)}
    for step in range(HOLD_AT):
        assert seen[step] == 1, f"request {step}, committed before the kill, reached the server again: {seen}"
    resent = seen[HOLD_AT] - 1
    assert resent <= 1, f"the request in flight at the kill was sent {resent} more times: {seen}"
    for step in range(HOLD_AT + 1, MODEL_REQUESTS):
        assert seen[step] == 1, seen
    assert ledger_lines(ledger) == ["tool record first", "tool record second"], "a side-effect tool body ran twice"
    print(f"requests at the server by step: {seen}; resent in-flight requests: {resent}")
