"""The `soloist` command, run as a real subprocess: output, report and exit codes.

``soloist run --json``: stdout is exactly one JSON document, whatever Ray prints. Ray forwards
what its worker processes print to the driver's stdout (``(pid=...) ...``, ``(raylet) WARNING:
...``); in the embedded run here every worker of the run prints a warning on stdout as it
starts; the document must still parse with ``json.loads(stdout)`` and the workers' lines must
reach stderr instead of being lost.

The commands that start no Ray of their own (usage errors, ``--help``, runs joining the
session's Ray by ``--address``) run one after another in one process (``cli``); the embedded
run and the interrupted one each start their own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._cli_process import CliProcess
from tests._signals import sigint_as_at_a_terminal

SOLOIST = [sys.executable, "-m", "cluster.cli"]
REPO_ROOT = Path(__file__).resolve().parents[2]


NOISY_WORKERS = textwrap.dedent('''\
    import sys
    import threading
    import time
    import warnings

    def _noise():
        while True:  # for the worker's whole life, so the lines printed while it serves the run are forwarded
            print("WARNING: noise a worker printed on stdout", flush=True)
            warnings.warn("noise a worker warned about")
            time.sleep(0.2)

    if any("default_worker" in arg for arg in sys.argv):  # Ray worker processes only, not the driver
        threading.Thread(target=_noise, daemon=True).start()
    ''')


def _env() -> dict[str, str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "COLUMNS": "200", "PYTHONPATH": str(REPO_ROOT)}
    env.pop("RAY_ADDRESS", None)
    return env


def _soloist(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SOLOIST, *args], capture_output=True, text=True, timeout=timeout, env=env or _env(), cwd=REPO_ROOT)


@pytest.fixture(scope="module")
def cli() -> Iterator[CliProcess]:
    """One process for this module's commands that start no Ray of their own."""
    with CliProcess(env=_env()) as process:
        yield process


@pytest.fixture(scope="module")
def fixture_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny package: `ledger.core` defines `TaxRule`, the package re-exports it, `ledger.api`
    imports it from `ledger.core` and `ledger.use` from the package; `build/` is ignored."""
    root = tmp_path_factory.mktemp("repo")
    files = {
        ".gitignore": "build/\n",
        "ledger/__init__.py": "from ledger.core import TaxRule\n",
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
        "ledger/use.py": "from ledger import TaxRule\n\nRULE = TaxRule()\n",
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


def test_help_reads_well_and_exits_zero(cli: CliProcess):
    result = cli("--help")
    assert result.returncode == 0
    for command in ("run", "status"):
        assert command in result.stdout
    run_help = cli("run", "--help")
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
def test_bad_arguments_exit_two_with_a_message_naming_the_problem(cli: CliProcess, args, message):
    result = cli(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr


def test_an_embedded_json_run_reports_the_defining_line_and_the_import_edge_whatever_its_workers_print(
        cli: CliProcess, fixture_repo: Path, tmp_path: Path):
    store = tmp_path / "runs.sqlite"
    noise = tmp_path / "noise"
    noise.mkdir()
    (noise / "sitecustomize.py").write_text(NOISY_WORKERS)
    env = {**_env(), "PYTHONPATH": os.pathsep.join([str(noise), str(REPO_ROOT)])}
    result = _soloist("run", "Where is `TaxRule` defined and who imports it?", "--root", str(fixture_repo),
                      "--json", "--store", str(store), "--name", "tax-run", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)  # nothing before or after the document
    assert "WARNING: noise a worker printed on stdout" in result.stderr  # moved to stderr, not lost
    assert "noise" not in result.stdout
    outcome = report["outcome"]
    assert outcome["status"] == "complete"
    summary = outcome["state"]["summary"]
    refs = {d["ref"] for d in summary["definitions"] if d["symbol"] == "TaxRule"}
    assert refs == {"ledger/core.py:6"}, summary["definitions"]
    importers = {(e["importer"], e["imported"], e["ref"]) for e in summary["importers"]}
    assert importers == {("ledger", "ledger.core", "ledger/__init__.py:1"), ("ledger.api", "ledger.core", "ledger/api.py:1"),
                         ("ledger.use", "ledger", "ledger/use.py:1")}  # the last one through the package's re-export
    assert report["cluster"] == "embedded" and report["startup_seconds"] > 0
    assert not any(f["path"].startswith("build/") for f in outcome["state"]["findings"])
    assert outcome["handoffs"] > 0 and outcome["handoff_errors"] == 0

    status = cli("status", "--store", str(store), "--json")
    assert status.returncode == 0, status.stderr
    runs = json.loads(status.stdout)["runs"]
    assert [(r["name"], r["version"]) for r in runs] == [("tax-run", outcome["version"])]


def test_while_stdout_is_reserved_anything_written_to_fd_1_goes_to_stderr(tmp_path: Path) -> None:
    script = textwrap.dedent('''\
        import os, subprocess, sys
        from cluster.cli import stdout_reserved
        print("before", flush=True)
        with stdout_reserved() as reserved:
            os.write(1, b"raw fd 1\\n")
            print("python print")
            subprocess.run([sys.executable, "-c", "print('a child process')"], check=True)
            reserved.write_document('{"ok": true}')
        print("after", flush=True)
        ''')
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == 'before\n{"ok": true}\nafter\n'
    assert result.stderr.split() == ["raw", "fd", "1", "python", "print", "a", "child", "process"]


@pytest.fixture
def session_address(ray_session: None) -> str:
    """The session's Ray, for runs whose subject is not the embedded Ray (that one is
    ``test_an_embedded_json_run_...``'s and ``test_ctrl_c_...``'s): they join it with
    ``--address`` and skip starting and stopping a Ray of their own."""
    import ray

    return str(ray.get_runtime_context().gcs_address)


def test_run_prints_a_human_report_with_file_line_references(cli: CliProcess, fixture_repo: Path, session_address: str):
    result = cli("run", "Where is `TaxRule` defined?", "--root", str(fixture_repo), "--address", session_address)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ledger/core.py:6" in result.stdout
    assert "Reasoning trail" in result.stdout
    assert "soloist run:" in result.stderr  # the live progress panel


def test_a_run_that_hits_the_turn_limit_exits_one_with_the_reason(cli: CliProcess, fixture_repo: Path, session_address: str):
    result = cli("run", "Where is `TaxRule` defined?", "--root", str(fixture_repo), "--max-turns", "2",
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
