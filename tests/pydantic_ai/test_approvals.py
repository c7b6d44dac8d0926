"""A tool that needs approval makes the run wait durably on a soloist interrupt, answered by
``soloist approve`` from another process; the agent then continues without any earlier model
request sent again, and the approved side effect happens once (ledger lines from inside)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray
from pydantic_ai import DeferredToolRequests

from actors.pydantic_ai import SoloistAgent
from tests.pydantic_ai._agents import build_approval_agent, ledger_lines

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

REPO = Path(__file__).resolve().parents[2]


def _soloist(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0", "COLUMNS": "300",
           "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    return subprocess.run([sys.executable, "-m", "cluster.cli", *args], capture_output=True, text=True, timeout=300,
                          env=env, cwd=REPO)


async def test_an_approval_is_an_interrupt_answered_by_soloist_approve_and_the_agent_goes_on(tmp_path: Path) -> None:
    store, ledger = tmp_path / "runs.sqlite", tmp_path / "ledger.log"
    durable = SoloistAgent(build_approval_agent(ledger), store=str(store))
    first = await durable.run("go", deps=str(ledger), run_id="post")
    assert isinstance(first.output, DeferredToolRequests)
    asked = ledger_lines(ledger)
    assert asked == ["model 0", "tool flaky 0", "model 1", "tool flaky 1", "model 2"]
    assert await durable.deferred_tool_results("post") is None  # still waiting

    run = durable.run_name("post")
    listed = _soloist("approve", run, "--store", str(store))
    assert listed.returncode == 0, listed.stderr[-3000:]
    interrupt_id, kind, agent, question = listed.stdout.strip().split(maxsplit=3)  # id, kind, agent, question
    assert (interrupt_id, kind, agent) == (f"{run}/i1", "turn", "publisher")
    assert json.loads(question) == {"agent": "publisher", "run_id": "post", "tool": "publish", "args": {"text": "post"},
                                    "tool_call_id": "publish-1"}
    answered = _soloist("approve", run, interrupt_id, "--store", str(store))
    assert answered.returncode == 0, answered.stderr[-3000:]

    # As a driver that restarted would: the first agent run again, answered from the journal...
    replayed = await durable.run("go", deps=str(ledger), run_id="post")
    assert isinstance(replayed.output, DeferredToolRequests)
    assert ledger_lines(ledger) == asked, "an earlier model request or tool body ran again"
    # ...then the conversation goes on with the person's answer.
    results = await durable.deferred_tool_results("post")
    assert results is not None and results.approvals == {"publish-1": True}
    done = await durable.run(deps=str(ledger), run_id="post-answered", message_history=replayed.all_messages(),
                             deferred_tool_results=results)
    assert done.output == "done: flaky=try again; flaky=flaky ok 1; publish=published post"
    assert ledger_lines(ledger) == [*asked, "tool publish post", "model 3"]
    assert _soloist("approve", run, "--store", str(store)).stdout.strip() == f"run {run} has no open interrupts"
