"""No soloist path blocks an async actor's event loop: a real run prints no Ray warning about it.

Ray prints "Using blocking ray.get inside async actor. This blocks the event loop." once per
process, from any thread of a process that runs an async actor (the semaphore, the
orchestrator, subagent replicas). A real driver process (``_event_loop_driver.py``) runs a
durable orchestrator with ``apply`` writes, handoffs under the semaphore (a crashed subagent
whose lease only the semaphore's probe frees, a lease the heartbeat renews inside a subagent)
and a nested run. Its whole output must hold no such line, and neither may any log file of its
Ray session (the driver's output is the user's view; the files hold every line even when the
driver exits before Ray has forwarded the last ones).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "tests" / "actors" / "_event_loop_driver.py"
HANG_GUARD = 600  # seconds: only a hang reaches it (a new embedded Ray is slow on a loaded machine)
BLOCKING = re.compile(r"blocking ray\.(get|wait) inside async|this blocks the event loop", re.IGNORECASE)


def _env(ray_tmp: str) -> dict[str, str]:
    """A user's shell (no Ray address: the driver starts its own Ray), with the session's
    files under ``ray_tmp``."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": ray_tmp}
    for name in ("RAY_ADDRESS", "RAY_AUTH_MODE"):
        env.pop(name, None)
    return env


def _blocking_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if BLOCKING.search(line)]


def test_a_run_through_every_async_actor_path_prints_no_blocking_warning(tmp_path):
    # Ray's socket paths must stay short: a directory directly under /tmp, not pytest's.
    with tempfile.TemporaryDirectory(prefix="loops", dir="/tmp") as ray_tmp:
        proc = subprocess.run([sys.executable, str(DRIVER), str(tmp_path)], capture_output=True, text=True,
                              timeout=HANG_GUARD, env=_env(ray_tmp), cwd=REPO)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"the driver failed ({proc.returncode}):\n{output[-6000:]}"
        done = [line.split() for line in proc.stdout.splitlines() if line.startswith("DONE")]
        assert done and int(done[-1][1]) == 2 and int(done[-1][2]) >= 1, proc.stdout
        assert "LOST" in proc.stdout and "RENEWED" in proc.stdout, proc.stdout

        logs = sorted(Path(ray_tmp).glob("ray/session_*/logs/*"))
        workers = [path for path in logs if path.name.startswith("worker-")]
        assert workers, f"no worker logs under {ray_tmp}: {[p.name for p in logs]}"
        in_files = {path.name: found for path in logs if path.is_file()
                    if (found := _blocking_lines(path.read_text(errors="replace")))}

    assert _blocking_lines(output) == [], "\n".join(_blocking_lines(output))
    assert in_files == {}, in_files
