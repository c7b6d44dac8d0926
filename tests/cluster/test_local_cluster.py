"""``soloist up`` / ``down``: a recorded local cluster that ``run`` and ``status`` join, and
that ``down`` stops without touching any process it did not start."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._waits import process_gone

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCH = [sys.executable, "-c", "import sys; from cluster.cli import main; sys.exit(main())"]

pytestmark = pytest.mark.timeout(600)


def soloist(home: Path, cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    # RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0 (Ray's documented switch, read by the head that
    # ``up`` starts): on SIGTERM from ``down`` the head skips Ray's drain, which waits its full
    # 30 s default here because the run's detached actors never leave the node idle. ``down``
    # still sends that SIGTERM, and the test still waits for the head's pid to be gone.
    env = {**os.environ, "SOLOIST_HOME": str(home), "PYTHONPATH": str(REPO_ROOT), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([*LAUNCH, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def test_down_never_signals_a_process_it_did_not_start(tmp_path: Path) -> None:
    home = tmp_path / "home"
    nothing = soloist(home, tmp_path, "down", timeout=60)
    assert nothing.returncode == 0 and "nothing was stopped" in nothing.stdout
    bystander = subprocess.Popen(["sleep", "600"])
    try:
        home.mkdir()
        (home / "local-cluster.json").write_text(json.dumps({
            "address": "127.0.0.1:1", "pid": bystander.pid, "port": 1, "started_at": "then", "log": "x", "num_cpus": 2,
        }))
        stale = soloist(home, tmp_path, "down", timeout=60)
        assert stale.returncode == 0 and "nothing was signalled" in stale.stdout, stale.stdout + stale.stderr
        assert bystander.poll() is None  # still running
        assert not (home / "local-cluster.json").exists()
    finally:
        bystander.kill()
        bystander.wait()


def test_up_run_status_down(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    package = tmp_path / "tiny"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "core.py").write_text("class Engine:\n    pass\n")
    (package / "use.py").write_text("from tiny.core import Engine\n")
    up = soloist(home, work, "up")
    assert up.returncode == 0, up.stderr[-3000:]
    assert "stop it with: soloist down" in up.stdout
    record = json.loads((home / "local-cluster.json").read_text())
    try:
        again = soloist(home, work, "up", timeout=120)
        assert again.returncode == 0 and "already running" in again.stdout
        assert json.loads((home / "local-cluster.json").read_text())["pid"] == record["pid"]

        run = soloist(home, work, "run", "Where is `Engine` defined and who imports it?", "--root", str(package),
                      "--json", "--store", "runs.sqlite", "--name", "joined-run")
        assert run.returncode == 0, run.stderr[-3000:]
        document = json.loads(run.stdout)
        assert document["cluster"] == "soloist up" and document["cluster_address"] == record["address"]
        assert document["startup_seconds"] > 0
        assert [i["importer"] for i in document["outcome"]["state"]["summary"]["importers"]] == ["tiny.use"]

        status = soloist(home, work, "status", "--json", timeout=120)  # no arguments: the cluster and ./runs.sqlite
        assert status.returncode == 0, status.stderr[-3000:]
        report = json.loads(status.stdout)
        assert report["address"] == record["address"] and report["store"] == "runs.sqlite"
        assert [(r["name"], r["source"]) for r in report["runs"]] == [("joined-run", "store")]
    finally:
        down = soloist(home, work, "down", timeout=180)
    assert down.returncode == 0 and f"stopped the local cluster at {record['address']}" in down.stdout, down.stderr
    asyncio.run(process_gone(record["pid"]))
    assert not (home / "local-cluster.json").exists()
