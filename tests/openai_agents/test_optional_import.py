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


def _imported_modules(path: Path) -> set[str]:
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_only_the_adapter_imports_the_sdk_and_nothing_imports_the_adapter() -> None:
    bad = []
    for package in ("coordinators", "actors", "cluster"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path.is_relative_to(REPO / "actors" / "openai_agents"):
                continue
            for module in _imported_modules(path):
                if module == "agents" or module.startswith(("agents.", "actors.openai_agents")):
                    bad.append(f"{path.relative_to(REPO)} imports {module}")
    assert bad == [], "; ".join(bad)
