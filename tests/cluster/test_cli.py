"""The `soloist` command, run as a real subprocess: output, report and exit codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests._signals import sigint_as_at_a_terminal

SOLOIST = [sys.executable, "-m", "cluster.cli"]
REPO_ROOT = Path(__file__).resolve().parents[2]


def _soloist(*args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "COLUMNS": "200", "PYTHONPATH": str(REPO_ROOT)}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([*SOLOIST, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd or REPO_ROOT)


@pytest.fixture(scope="module")
def fixture_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny package: `ledger.core` defines `TaxRule`, `ledger.api` imports it, `build/` is ignored."""
    root = tmp_path_factory.mktemp("repo")
    files = {
        ".gitignore": "build/\n",
        "ledger/__init__.py": "",
        "ledger/core.py": '''\
            """Core rules."""

            RATE = 0.2


            class TaxRule:
                def apply(self, amount: float) -> float:
                    return amount * RATE
            ''',
        "ledger/api.py": '''\
            from ledger.core import TaxRule


            def charge(amount: float) -> float:
                return TaxRule().apply(amount)
            ''',
        "build/ledger/core.py": "class TaxRule:  # a stale copy that must be ignored\n    pass\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_output_through_a_pipe_keeps_a_long_line_whole(tmp_path: Path):
    # Through a pipe and without COLUMNS, rich would wrap at 80 columns and split a path or a
    # command someone copies from the output across lines.
    missing = tmp_path / ("a-long-directory-name-" * 6) / "runs.sqlite"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO_ROOT)}
    for name in ("COLUMNS", "LINES", "RAY_ADDRESS"):
        env.pop(name, None)
    result = subprocess.run([*SOLOIST, "status", "--store", str(missing)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, timeout=300, env=env, cwd=tmp_path)
    expected = f"soloist status: no store at {str(missing)!r}"
    assert len(expected) > 200 and result.returncode == 2
    assert expected in [line.rstrip() for line in result.stderr.splitlines()], result.stderr


def test_bench_outside_a_source_checkout_says_the_benchmarks_are_not_importable(tmp_path: Path):
    # An installed soloist has no benchmarks package: a copy of the three packages alone.
    for package in ("actors", "cluster", "coordinators"):
        shutil.copytree(REPO_ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([*SOLOIST, "bench", "--quick"], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "the benchmarks package is not importable here" in result.stderr and "python -m benchmarks" in result.stderr


def test_help_reads_well_and_exits_zero():
    result = _soloist("--help")
    assert result.returncode == 0
    for command in ("run", "status"):
        assert command in result.stdout
    run_help = _soloist("run", "--help")
    assert run_help.returncode == 0
    for flag in ("--root", "--address", "--store", "--max-turns", "--max-parallel", "--json"):
        assert flag in run_help.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (("run", "find x", "--root", "/definitely/not/here"), "is not a directory"),
        (("run", "   ", "--root", "."), "the task is empty"),
        (("run", "find x", "--max-turns", "0"), "expected a number >= 1"),
        (("status", "--store", "/definitely/not/here.sqlite"), "no store at"),
        (("status", "--limit", "0"), "argument --limit: expected a number >= 1, got 0"),
        (("status", "--status", "finished"), "invalid choice: 'finished' (choose from 'running', 'waiting', 'complete'"),
        (("frobnicate",), "invalid choice"),
    ],
)
def test_bad_arguments_exit_two_with_a_message_naming_the_problem(args, message):
    result = _soloist(*args, timeout=120)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr


def test_run_reports_the_defining_file_and_line_and_the_import_edge(fixture_repo: Path, tmp_path: Path):
    store = tmp_path / "runs.sqlite"
    result = _soloist("run", "Where is `TaxRule` defined and who imports it?", "--root", str(fixture_repo),
                      "--json", "--store", str(store), "--name", "tax-run")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    outcome = report["outcome"]
    assert outcome["status"] == "complete"
    summary = outcome["state"]["summary"]
    refs = {d["ref"] for d in summary["definitions"] if d["symbol"] == "TaxRule"}
    assert refs == {"ledger/core.py:6"}, summary["definitions"]
    importers = {(e["importer"], e["imported"], e["ref"]) for e in summary["importers"]}
    assert importers == {("ledger.api", "ledger.core", "ledger/api.py:1")}
    assert report["cluster"] == "embedded" and report["startup_seconds"] > 0
    assert not any(f["path"].startswith("build/") for f in outcome["state"]["findings"])
    assert outcome["handoffs"] > 0 and outcome["handoff_errors"] == 0

    status = _soloist("status", "--store", str(store), "--json", timeout=120)
    assert status.returncode == 0, status.stderr
    runs = json.loads(status.stdout)["runs"]
    assert [(r["name"], r["version"]) for r in runs] == [("tax-run", outcome["version"])]


@pytest.fixture
def session_address(ray_session: None) -> str:
    """The session's Ray, for runs whose subject is not the embedded Ray (that one is
    ``test_run_reports_...``'s and ``test_ctrl_c_...``'s): they join it with ``--address``
    and skip starting and stopping a Ray of their own."""
    import ray

    return str(ray.get_runtime_context().gcs_address)


def test_run_prints_a_human_report_with_file_line_references(fixture_repo: Path, session_address: str):
    result = _soloist("run", "Where is `TaxRule` defined?", "--root", str(fixture_repo), "--address", session_address)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ledger/core.py:6" in result.stdout
    assert "Reasoning trail" in result.stdout
    assert "soloist run:" in result.stderr  # the live progress panel


def test_a_run_that_hits_the_turn_limit_exits_one_with_the_reason(fixture_repo: Path, session_address: str):
    result = _soloist("run", "Where is `TaxRule` defined?", "--root", str(fixture_repo), "--max-turns", "2",
                      "--address", session_address)
    assert result.returncode == 1
    assert "maximum of 2 turns" in result.stderr


def test_ctrl_c_cancels_in_flight_handoffs_and_leaves_no_pending_call():
    import signal
    import time

    import ray as _ray

    ray_tree = os.path.dirname(_ray.__file__)  # a large real tree: searches take a while
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO_ROOT)}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen(
        [*SOLOIST, "run", "Where are `ActorPool`, `placement_group` and `RuntimeContext` defined?", "--root", ray_tree,
         "--json", "--max-parallel", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT,
        preexec_fn=sigint_as_at_a_terminal,
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 240
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if " in flight " in line and " in flight 0 " not in line:
            proc.send_signal(signal.SIGINT)
            break
        assert time.monotonic() < deadline, "".join(seen[-20:])
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen[-20:]) + err[-3000:]
    outcome = json.loads(out)["outcome"]
    assert outcome["status"] == "cancelled"
    assert outcome["pending_calls"] == 0
    assert "interrupted" in err or "cancelled" in outcome["reason"]
