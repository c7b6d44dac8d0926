"""The in-process example: a coordinator's turns on a RunCore, no Ray, taken up again from its store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_coordinator_runs_its_turns_on_a_run_core_without_ray_and_resumes_from_the_store(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, str(REPO / "examples" / "coordinator_in_process.py"), str(store)],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["refused: key 'missing' not in conversation_state", "2 5 complete 2"]
    assert "ray" not in result.stderr.lower()  # no Ray started
    assert store.exists()
