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


def _section_block(heading: str) -> str:
    text = README.read_text()
    section = text.split(heading, 1)[1]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]


@pytest.mark.ray
def test_the_write_your_own_run_example_runs_and_prints_what_it_says(ray_session, tmp_path: Path):
    import ray

    script = tmp_path / "own_run.py"
    script.write_text(_section_block("## Write your own run"))
    # joins the session's Ray through RAY_ADDRESS, as `connect()` does on a machine with a running cluster
    env = {**os.environ, "PYTHONPATH": str(README.parent), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "waiting ['count_words']"
    assert lines[1].startswith("resumed ") and lines[-3].startswith("finished ")
    assert lines[-2:] == ['complete {"words": 5} 2', "[4, 5, 6]"]


def test_the_readme_shows_the_help_of_the_run_commands():
    text = README.read_text()
    for command in ("soloist approve RUN", "soloist run --resume RUN", "soloist history RUN", "soloist fork RUN --at N",
                    "soloist gc --store PATH --older-than"):
        assert command in text
