"""The OpenAI Agents SDK stays optional: importing soloist's packages never imports it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_importing_actors_cluster_and_coordinators_never_imports_the_agents_sdk() -> None:
    probe = ("import sys, actors, cluster, coordinators; "
             "print(sorted(m for m in sys.modules if m == 'agents' or m.startswith(('agents.', 'actors.openai_agents'))))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
