"""The README's commands and example stay true.

The examples that moved to the documentation (write your own run, ...) run in tests/test_docs.py."""

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


INSTALL_AND_RUN = ("python3.11 -m venv .venv && . .venv/bin/activate && pip install -e . && "
                   "soloist run 'Where is `Orchestrator` defined and who imports it?' --root .")
INSTALL_AND_TEST = "python3.11 -m venv .venv && . .venv/bin/activate && scripts/test"


def test_readme_starts_with_the_install_and_run_command_then_the_test_command():
    assert [block.strip() for block in _blocks("bash")[:2]] == [INSTALL_AND_RUN, INSTALL_AND_TEST]


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
    assert _own_lines(result.stdout)[-2:] == ["1 95", "1 exploring ['search', 'read']"]


#: A line Ray forwarded from another process to the driver's stdout: "(raylet) WARNING ..."
#: or "(Actor pid=...) ...", coloured on a terminal.
_FORWARDED = re.compile(r"^(\x1b\[[0-9;]*m)*\((raylet|[^)]*pid=\d+)")


def _own_lines(stdout: str) -> list[str]:
    """The lines the script printed itself (what Ray forwards from workers is not the example's)."""
    return [line for line in stdout.splitlines() if not _FORWARDED.match(line)]


def test_the_readme_shows_the_help_of_the_run_commands():
    text = README.read_text()
    for command in ("soloist approve RUN", "soloist run --resume RUN", "soloist history RUN", "soloist fork RUN --at N",
                    "soloist gc --store PATH --older-than"):
        assert command in text
