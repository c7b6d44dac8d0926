""".ci/loaded: busy loops run beside every CI run, stop at the first failure, and are gone after.

The real ``.ci/run`` takes twenty minutes, so each test copies ``.ci/loaded`` beside a stand-in
``.ci/run`` that records what it saw and exits with a chosen code.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests._waits import eventually

LOADED = Path(__file__).resolve().parents[1] / ".ci" / "loaded"

# The stand-in: the busy loops are children of .ci/loaded, which is this script's parent.
_FAKE_RUN = """#!/usr/bin/env bash
pgrep -P "$PPID" -f "while True: pass" | tr '\\n' ' ' >> "$(dirname "$0")/seen"
echo >> "$(dirname "$0")/seen"
exit "${FAKE_RC:-0}"
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    ci = tmp_path / ".ci"
    ci.mkdir()
    shutil.copy(LOADED, ci / "loaded")
    (ci / "run").write_text(_FAKE_RUN)
    (ci / "run").chmod(0o755)
    return tmp_path


def _loaded(checkout: Path, *args: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FAKE_RC": str(rc)}
    return subprocess.run(["bash", str(checkout / ".ci" / "loaded"), *args], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=60)


def _seen(checkout: Path) -> list[list[int]]:
    return [[int(p) for p in line.split()] for line in (checkout / ".ci" / "seen").read_text().splitlines()]


def _wait_gone(pids: set[int]) -> set[int]:
    """The pids still alive once they are all gone (the loops are killed before .ci/loaded
    exits, and only need reaping); fails after 30 s, a generous bound."""

    async def alive() -> set[int]:
        return {p for p in pids if Path(f"/proc/{p}").exists() and "Z" not in _state(p)}

    return asyncio.run(eventually(alive, lambda still: not still, "the busy loops to exit", timeout=30))


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return "Z"


def test_every_run_has_the_busy_loops_beside_it_and_none_outlives_the_script(checkout: Path) -> None:
    done = _loaded(checkout, "2", "3")
    assert done.returncode == 0, done.stderr
    seen = _seen(checkout)
    assert len(seen) == 3 and all(len(pids) == 2 for pids in seen), seen
    assert seen[0] == seen[1] == seen[2]  # the same two loops, all along
    assert _wait_gone(set(seen[0])) == set()
    assert done.stdout.count("exit 0 after") == 3


def test_it_stops_at_the_first_failing_run_with_that_runs_exit_code(checkout: Path) -> None:
    done = _loaded(checkout, "1", "3", rc=3)
    assert done.returncode == 3
    seen = _seen(checkout)
    assert len(seen) == 1 and len(seen[0]) == 1, seen
    assert "loaded run 1 of 3: exit 3" in done.stdout and "loaded run 2" not in done.stdout
    assert _wait_gone(set(seen[0])) == set()


@pytest.mark.parametrize("args", [["x"], ["2", "0"], ["2", "-1"], ["2", "3x"], ["", "1"]])
def test_bad_arguments_are_refused_and_nothing_runs(checkout: Path, args: list[str]) -> None:
    done = _loaded(checkout, *args)
    assert done.returncode == 2
    assert "usage: .ci/loaded [LOOPS] [RUNS]" in done.stderr and "got" in done.stderr
    assert not (checkout / ".ci" / "seen").exists()
