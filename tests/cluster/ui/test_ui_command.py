"""``soloist ui`` and ``soloist run --ui`` as real commands: exit codes, printed URLs, a served page."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from cluster.cli import main
from tests._signals import sigint_as_at_a_terminal

REPO_ROOT = Path(__file__).resolve().parents[3]
SOLOIST = [sys.executable, "-m", "cluster.cli"]


def _env() -> dict[str, str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "COLUMNS": "200", "PYTHONPATH": str(REPO_ROOT)}
    env.pop("RAY_ADDRESS", None)
    return env


def test_ui_refuses_a_public_address_without_the_explicit_flag(capsys) -> None:
    assert main(["ui", "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "--i-know-this-is-public" in capsys.readouterr().err


def test_ui_refuses_a_missing_store(tmp_path: Path, capsys) -> None:
    assert main(["ui", "--store", str(tmp_path / "nope.sqlite")]) == 2
    assert "no store at" in capsys.readouterr().err


def test_ui_serves_the_runs_page_and_prints_its_url_and_token(tmp_path: Path) -> None:
    proc = subprocess.Popen([*SOLOIST, "ui", "--port", "0", "--allow-actions"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path, preexec_fn=sigint_as_at_a_terminal)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.search(r"soloist ui: (http://127\.0\.0\.1:\d+/)", first)
        assert match, first + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        token_line = proc.stdout.readline()
        assert re.search(r"token \(shown once\): \S{24,}", token_line), token_line
        url = match.group(1)
        page = urllib.request.urlopen(url, timeout=60).read().decode()
        assert '<script src="/static/app.js"' in page
        runs = json.loads(urllib.request.urlopen(url + "api/runs", timeout=60).read())
        assert runs["actions"] is True and isinstance(runs["runs"], list)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def test_run_with_ui_prints_the_url_of_the_run_page(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "core.py").write_text("class Widget:\n    pass\n")
    result = subprocess.run([*SOLOIST, "run", "Where is `Widget` defined?", "--root", str(root), "--ui", "--json",
                             "--name", "ui-cli-run"], capture_output=True, text=True, timeout=300, env=_env(), cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"watch this run at http://127\.0\.0\.1:\d+/run\?name=ui-cli-run", result.stderr), result.stderr[-3000:]
    assert json.loads(result.stdout)["outcome"]["status"] == "complete"  # stdout stays pure JSON
