"""The runnable examples in examples/, run as real subprocesses, and the commands that
answer, resume, list, fork and collect their runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._cli_process import CliProcess

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

pytestmark = [pytest.mark.timeout(600), pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


def _env() -> dict[str, str]:
    """The environment of a process that joins the session's Ray (one cluster for every step,
    as on a real machine where ``ray start`` runs once), through ``RAY_ADDRESS``."""
    import ray

    return {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0", "COLUMNS": "200",
            "RAY_ADDRESS": ray.get_runtime_context().gcs_address}


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a process that joins the session's Ray."""
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=_env(), cwd=REPO)


def _counts(path: Path) -> dict[str, int]:
    seen: dict[str, int] = {}
    for line in path.read_text().splitlines():
        seen[line] = seen.get(line, 0) + 1
    return seen


ALL_ONCE = {"coordinator:researcher": 1, "skill:lookup:soloist": 1, "skill:lookup:ray": 1, "coordinator:writer": 1,
            "skill:publish": 1, "coordinator:editor": 1}


def test_the_approval_example_runs_to_completion_approving_in_process(tmp_path: Path) -> None:
    effects = tmp_path / "effects.log"
    result = _run(sys.executable, str(EXAMPLES / "approval_run.py"), "--effects", str(effects))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "complete: verdict=published turns=3 handoffs=3" in result.stdout
    assert _counts(effects) == ALL_ONCE


def test_the_approval_example_waits_then_soloist_approve_and_resume_finish_it_once(tmp_path: Path) -> None:
    store, effects = tmp_path / "runs.sqlite", tmp_path / "effects.log"
    first = _run(sys.executable, str(EXAMPLES / "approval_run.py"), "--store", str(store), "--name", "post-1",
                 "--effects", str(effects), "--stop-at-approval")
    assert first.returncode == 3, first.stderr[-3000:]
    assert "interrupt post-1/i1" in first.stdout
    before = _counts(effects)
    assert "skill:publish" not in before and before["coordinator:writer"] == 1

    # The commands, one after another, in one process that joins the session's Ray once.
    with CliProcess(env=_env()) as soloist:
        listed = soloist("approve", "post-1", "--store", str(store))
        assert listed.returncode == 0 and "post-1/i1" in listed.stdout, listed.stderr[-3000:]
        wrong = soloist("approve", "post-1", "other-run/i1", "--store", str(store))
        assert wrong.returncode == 1 and "belongs to run 'other-run'" in wrong.stderr
        answered = soloist("approve", "post-1", "post-1/i1", "--store", str(store), "--reason", "fine")
        assert answered.returncode == 0 and "approved post-1/i1" in answered.stdout, answered.stderr[-3000:]
        twice = soloist("approve", "post-1", "post-1/i1", "--store", str(store), "--reject")
        assert twice.returncode == 1 and "already approved" in twice.stderr

        resumed = soloist("run", "--resume", "post-1", "--store", str(store), "--json")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        outcome = json.loads(resumed.stdout)["outcome"]
        assert outcome["status"] == "complete" and outcome["state"]["verdict"] == "published"
        assert _counts(effects) == ALL_ONCE  # nothing before the approval ran again

        history = soloist("history", "post-1", "--store", str(store), "--json")
        assert history.returncode == 0, history.stderr[-3000:]
        versions = [json.loads(line)["version"] for line in history.stdout.splitlines() if line.strip()]
        assert versions == list(range(1, outcome["version"] + 1))

        forked = soloist("fork", "post-1", "--at", "3", "--name", "post-1-b", "--store", str(store))
        assert forked.returncode == 0, forked.stderr[-3000:]
        too_far = soloist("fork", "post-1", "--at", "999", "--name", "post-1-c", "--store", str(store))
        assert too_far.returncode == 1 and "is not committed" in too_far.stderr

        kept = soloist("gc", "--store", str(store), "--older-than", "7d")
        assert kept.returncode == 0 and "removed 0 finished run(s)" in kept.stdout
        collected = soloist("gc", "--store", str(store), "--older-than", "0s", "--json")
        assert collected.returncode == 0, collected.stderr[-3000:]
        report = json.loads(collected.stdout)
        assert report["removed"] == ["post-1"] and report["kept"] == ["post-1-b"]  # the fork never finished


def test_the_fork_and_compare_example_ends_its_two_branches_differently(tmp_path: Path) -> None:
    result = _run(sys.executable, str(EXAMPLES / "fork_compare.py"), "--store", str(tmp_path / "runs.sqlite"))
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert any(line.endswith(": True") and line.startswith("fork equals the original") for line in lines)
    assert "approved branch: price=200 audit='price is 200'" in lines
    assert "rejected branch: price=100 audit='price is 100'" in lines
