"""examples/research_run.py, offline, as a real process: four pydantic-ai agents in one
durable run, the two specialists consulted at once, the writer's publish approved once.

What the example did is counted from outside it: the scripted models append a line per
request they really receive (in the model subagents' replicas) to a ledger, and ``publish``
appends the post to a file of its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import ray

from actors import Orchestrator, answer_interrupt
from tests.openai_agents._server import CountingServer

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "research_run.py"

pytestmark = [pytest.mark.timeout(600), pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

#: Each request the scripted models receive in a whole run: triage 3, each specialist 2, writer 2.
ALL_REQUESTS = ["model triage 0", "model triage 1", "model triage 2", "model historian 0", "model historian 1",
                "model economist 0", "model economist 1", "model writer 0", "model writer 1"]

#: The steps of each agent run, in the one run research.<run id> (tools of one response in any order).
STEPS = {
    "triage/{r}": ["model:0", "tool:0:ask-economist", "tool:0:ask-historian", "model:1", "tool:1:write", "model:2"],
    "historian/{r}-ask-historian": ["model:0", "tool:0:historian-lookup", "model:1"],
    "economist/{r}-ask-economist": ["model:0", "tool:0:economist-lookup", "model:1"],
    "writer/{r}-writer-write": ["model:0"],
}
#: The writer's run that goes on with the person's answer: the approved call runs, then the model answers.
ANSWERED = {"writer/{r}-writer-write-answered": ["tool:-1:publish", "model:0"]}


def _env(**endpoint: str) -> dict[str, str]:
    """Join the session's Ray; the model endpoint only when given (else the example's scripted models)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SOLOIST_LLM_")}
    return {**env, **endpoint, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_ADDRESS": ray.get_runtime_context().gcs_address}


def _example(tmp_path: Path, run_id: str, *extra: str, env: dict[str, str] | None = None,
             offline: bool = True) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, str(EXAMPLE), *(["--offline"] if offline else []), "--run-id", run_id,
            "--store", str(tmp_path / "runs.sqlite"), "--published", str(tmp_path / "posts.jsonl"), *extra]
    if offline:
        args += ["--ledger", str(tmp_path / "ledger.log")]
    return subprocess.run(args, capture_output=True, text=True, timeout=300, env=env or _env(), cwd=REPO)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _published(posts: Path) -> int:
    """How many posts ``publish`` wrote; each must be the two specialists' findings."""
    written = [json.loads(line) for line in _lines(posts)]
    for post in written:
        assert post["title"] == "Jets" and "Comet" in post["body"] and "jet fuel" in post["body"].lower(), post
    return len(written)


def _in_order(keys: list[str]) -> list[str]:
    """Step keys in commit order, except that the tool calls of one response (which commit in
    the order they finish) are sorted."""
    ordered: list[str] = []
    for key in keys:
        response = key.split(":")[1] if key.startswith("tool:") else None
        group = []
        while response is not None and ordered and ordered[-1].startswith(f"tool:{response}:"):
            group.append(ordered.pop())
        ordered.extend(sorted([*group, key]))
    return ordered


def _steps(stdout: str, block: int) -> dict[str, list[str]]:
    """The ``block``-th listing of steps the example printed: run key -> step keys."""
    steps: dict[str, list[str]] = {}
    for line in stdout.split("steps:\n")[block + 1].splitlines():
        if line.startswith(("(", "\x1b")):
            continue  # a line Ray forwarded from another process
        if not line.startswith("  "):
            break
        run_key, keys = line.strip().split(": ", 1)
        steps[run_key] = _in_order(keys.split())
    return steps


def _expected(r: str, *tables: dict[str, list[str]]) -> dict[str, list[str]]:
    return {key.format(r=r): keys for table in tables for key, keys in table.items()}


def test_the_research_run_consults_both_specialists_at_once_and_publishes_once_after_its_approval(tmp_path: Path) -> None:
    ledger, posts = tmp_path / "ledger.log", tmp_path / "posts.jsonl"
    result = _example(tmp_path, "r1")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "research run research.r1 on scripted models (offline)" in out
    assert ("triage: 2 findings on 'jet travel'; writer says: the post waits for a person to approve 1 publish call(s)"
            in out)
    assert _steps(out, 0) == _expected("r1", STEPS)
    assert 'approval research.r1/i1 (open): {"agent": "writer", "run_id": "r1-writer-write", "tool": "publish"' in out
    assert "approved research.r1/i1" in out
    assert "writer: done: published 'Jets' (144 characters) to posts.jsonl" in out
    assert _steps(out, 1) == _expected("r1", STEPS, ANSWERED)

    requests = _lines(ledger)
    assert sorted(requests) == sorted(ALL_REQUESTS)  # each request reached its model once
    # Each specialist's first request waited for the other's to arrive: both were asked at once.
    assert "asked alone" not in out
    first_answers = min(requests.index("model historian 1"), requests.index("model economist 1"))
    assert {"model historian 0", "model economist 0"} <= set(requests[:first_answers])
    assert _published(posts) == 1  # published once, after the approval

    # The same run id again: every step is answered from the journal, nothing is sent or published again.
    again = _example(tmp_path, "r1")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "approval research.r1/i1 (approved)" in again.stdout and "approved research.r1/i1" not in again.stdout
    assert "writer: done: published 'Jets' (144 characters) to posts.jsonl" in again.stdout
    assert _lines(ledger) == requests
    assert _published(posts) == 1


async def test_the_research_run_waits_for_a_person_and_a_new_process_publishes_after_the_answer(tmp_path: Path) -> None:
    ledger, posts, store = tmp_path / "ledger.log", tmp_path / "posts.jsonl", tmp_path / "runs.sqlite"
    first = _example(tmp_path, "r2", "--stop-at-approval")
    assert first.returncode == 3, first.stderr[-3000:]
    assert f"answer with: soloist approve research.r2 research.r2/i1 --store {store}" in first.stdout
    before = _lines(ledger)
    assert sorted(before) == sorted(set(ALL_REQUESTS) - {"model writer 1"})
    assert not posts.exists()

    # A person answers from another process (this one), through the store, as `soloist approve` does.
    run = await asyncio.to_thread(Orchestrator.attach, "research.r2", store=str(store))
    try:
        await answer_interrupt(run, "research.r2/i1", approve=True, reason="fine")
    finally:
        await run.close()

    resumed = _example(tmp_path, "r2")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "approval research.r2/i1 (approved)" in resumed.stdout
    assert "writer: done: published 'Jets' (144 characters) to posts.jsonl" in resumed.stdout
    assert _steps(resumed.stdout, 1) == _expected("r2", STEPS, ANSWERED)
    assert _lines(ledger) == [*before, "model writer 1"]  # no earlier request sent again
    assert _published(posts) == 1


class _ResearchEndpoint:
    """The example's script as an OpenAI-compatible endpoint (``CountingServer``'s script): the
    conversation's label is its first user message, its step the answers so far. The two
    specialists' first requests meet at a barrier, so they are answered only if both were in
    flight at once."""

    def __init__(self) -> None:
        self.meeting = threading.Barrier(2)
        self.alone = 0

    def __call__(self, label: str, step: int, messages: list[dict[str, Any]]) -> dict[str, Any]:
        returns = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
        if label == "jet travel":
            if step == 0:
                return {"tool_calls": [
                    ("ask-historian", "consult", {"specialist": "historian", "question": "How did jet travel begin?"}),
                    ("ask-economist", "consult", {"specialist": "economist", "question": "What does jet travel cost?"}),
                ]}
            if step == 1:
                return {"tool_calls": [("write", "write", {"notes": "\n".join(returns)})]}
            return {"content": f"triage: writer says: {returns[-1]}"}
        if label.startswith("Notes:"):
            if step == 0:
                return {"tool_calls": [("publish", "publish", {"title": "Jets", "body": label[len("Notes:"):].strip()})]}
            return {"content": f"done: {returns[-1]}"}
        role = "historian" if label.startswith("How did") else "economist"
        if step == 0:
            try:
                self.meeting.wait(timeout=120)  # a bound for a broken run, not a pace
            except threading.BrokenBarrierError:
                self.alone += 1
            return {"tool_calls": [(f"{role}-lookup", "lookup", {"subject": label})]}
        return {"content": f"{role}: {returns[-1]}"}


def test_the_research_run_talks_to_the_endpoint_in_the_environment(tmp_path: Path) -> None:
    script = _ResearchEndpoint()
    with CountingServer(script) as server:
        env = _env(SOLOIST_LLM_BASE_URL=server.base_url, SOLOIST_LLM_MODEL="test-model")
        result = _example(tmp_path, "r3", env=env, offline=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"research run research.r3 on test-model at {server.base_url}" in result.stdout
    assert "approved research.r3/i1" in result.stdout
    assert re.search(r"^writer: done: published 'Jets' \(\d+ characters\) to posts.jsonl$", result.stdout, re.M)
    assert _steps(result.stdout, 1) == _expected("r3", STEPS, ANSWERED)
    assert sorted(server.counts.values()) == [1] * 9  # nine requests, each received once
    assert script.alone == 0  # the specialists' first requests were at the server together
    assert _published(tmp_path / "posts.jsonl") == 1
