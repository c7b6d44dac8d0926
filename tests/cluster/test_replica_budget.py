"""The cluster-wide replica budget grants a freed place to the request that has waited
longest, whatever order the requests arrived in (on a Ray of its own: no other replica may
free a place meanwhile)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("_budget_order_driver.py")


def test_a_freed_place_goes_to_the_request_that_waited_longest() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, str(DRIVER)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "ORDER old young" in done.stdout
