"""``soloist run --json``: stdout is exactly one JSON document, whatever Ray prints.

Ray forwards what its worker processes print to the driver's stdout (``(pid=...) ...``,
``(raylet) WARNING: ...``). Here every worker of the run prints a warning on stdout as it
starts; the document must still parse with ``json.loads(stdout)`` and the workers' lines
must reach stderr instead of being lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCH = [sys.executable, "-c", "import sys; from cluster.cli import main; sys.exit(main())"]

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


@pytest.fixture
def package(tmp_path: Path) -> Path:
    root = tmp_path / "repo" / "tiny"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("from tiny.core import Engine\n")
    (root / "core.py").write_text("class Engine:\n    pass\n")
    (root / "use.py").write_text("from tiny import Engine\n\nENGINE = Engine()\n")
    return root


def test_json_stdout_parses_while_every_worker_prints_warnings(package: Path, tmp_path: Path) -> None:
    noise = tmp_path / "noise"
    noise.mkdir()
    (noise / "sitecustomize.py").write_text(NOISY_WORKERS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(noise), str(REPO_ROOT)]), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    result = subprocess.run(
        [*LAUNCH, "run", "Where is `Engine` defined and who imports it?", "--root", str(package), "--json"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads(result.stdout)  # nothing before or after the document
    summary = document["outcome"]["state"]["summary"]
    assert {(i["importer"], i["ref"]) for i in summary["importers"]} == {("tiny", "__init__.py:1"), ("tiny.use", "use.py:1")}
    assert "WARNING: noise a worker printed on stdout" in result.stderr  # moved to stderr, not lost
    assert "noise" not in result.stdout


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
