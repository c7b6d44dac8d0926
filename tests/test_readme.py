"""The README's commands and example stay true."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_starts_with_the_install_and_run_command_then_the_test_command():
    commands = _blocks("bash")[:2]
    assert "pip install -e ." in commands[0] and "soloist run" in commands[0]
    assert 'pip install -e ".[test]"' in commands[1] and "pytest" in commands[1]


def test_ci_runs_the_readmes_test_command_verbatim():
    test_command = _blocks("bash")[1].strip().split("&& ", 2)[-1]
    ci = (README.parent / ".ci" / "run").read_text()
    assert test_command in ci


@pytest.mark.ray
def test_the_api_example_runs_and_prints_what_it_says(tmp_path: Path):
    example = _blocks("python")[0]  # the API example; later blocks are fragments
    script = tmp_path / "example.py"
    script.write_text(example)
    env = {**os.environ, "PYTHONPATH": str(README.parent), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-2:] == ["1 95", "1 exploring ['search', 'read']"]
