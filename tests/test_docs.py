"""The documentation site builds, its programs run, and its reference pages stay complete."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
CONFIGURATION = DOCS / "configuration.md"

#: Where the code reads its ``SOLOIST_*`` variables (the tests' own are documented too, but not required).
CODE_DIRS = ("coordinators", "actors", "cluster", "benchmarks")
_VARIABLE = re.compile(r"\bSOLOIST_[A-Z0-9_]+\b")

#: Ray forwards lines of other processes to the driver's stdout: "(raylet) ..." or "(Actor pid=...) ...".
_FORWARDED = re.compile(r"^(\x1b\[[0-9;]*m)*\((raylet|[^)]*pid=\d+)")


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md"))


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def _is_program(block: str) -> bool:
    """A complete program, not a fragment: it runs its own entry point."""
    return "asyncio.run(main())" in block or 'if __name__ == "__main__"' in block


def _programs() -> list[tuple[str, str]]:
    return [(str(page.relative_to(DOCS)), block) for page in _pages() for block in _python_blocks(page)
            if _is_program(block)]


def _needs_ray(block: str) -> bool:
    return bool(re.search(r"^\s*(from|import) (actors|cluster|ray)\b", block, flags=re.M))


def _own_lines(stdout: str) -> list[str]:
    """The lines the program printed itself (what Ray forwards from workers is not the program's)."""
    return [line for line in stdout.splitlines() if not _FORWARDED.match(line)]


# --- the site builds --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=env,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return out


def test_the_site_builds_in_strict_mode(site: Path):
    for page in ("index.html", "getting-started/index.html", "configuration/index.html", "design/index.html",
                 "benchmarks/index.html", "reference/cli/index.html"):
        assert (site / page).is_file(), page


def test_getting_started_shows_the_readmes_api_example(site: Path):
    html = (site / "getting-started" / "index.html").read_text()
    assert "parallel_handoff" in html and "1 exploring" in html


def test_the_command_line_reference_has_the_help_of_every_command(site: Path):
    from cluster.cli import build_parser

    html = (site / "reference" / "cli" / "index.html").read_text()
    # the commands as `soloist --help` lists them, under its COMMAND heading
    listing = build_parser().format_help().split("COMMAND\n", 1)[1].split("\n\n", 1)[0]
    commands = re.findall(r"^    ([a-z][a-z-]*)\b", listing, flags=re.M)
    assert {"run", "status", "approve", "history", "fork", "gc", "up", "down", "ui"} <= set(commands)
    for name in commands:
        assert f"soloist {name}</code>" in html, name
    for option in ("--older-than", "--allow-actions", "--max-parallel", "--resume", "--to-store"):
        assert option in html, option


@pytest.mark.parametrize("package", ["coordinators", "actors", "cluster"])
def test_the_api_reference_renders_every_public_name(site: Path, package: str):
    html = (site / "reference" / f"api-{package}" / "index.html").read_text()
    module = importlib.import_module(package)
    missing = []
    for name in module.__all__:
        defined_in = getattr(getattr(module, name), "__module__", None)
        anchors = {f'id="{package}.{name}"', f'id="{defined_in}.{name}"'}
        if not any(anchor in html for anchor in anchors):
            missing.append(name)
    assert not missing, f"{package}: not in the API reference: {missing}"


# --- the pages' programs run ------------------------------------------------------------------


def test_the_docs_hold_complete_programs():
    assert {page for page, _ in _programs()} >= {"concepts/coordinators.md", "guides/write-your-own-run.md"}


def _expected_output(page: str, block: str) -> list[str] | None:
    """The ```text block the page gives right after the program as what it prints, if any."""
    text = (DOCS / page).read_text()
    after = text.split(block, 1)[1]
    match = re.match(r"```\s*\n+[^`]*?It prints:\s*\n+```text\n(.*?)```", after, flags=re.S)
    return match.group(1).strip().splitlines() if match else None


def _run(block: str, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "program.py"
    script.write_text(block)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)


_PROGRAMS = _programs()


@pytest.mark.parametrize(
    ("page", "block"),
    [pytest.param(page, block, id=f"{page}#{i}", marks=[pytest.mark.ray] if _needs_ray(block) else [])
     for i, (page, block) in enumerate(_PROGRAMS)],
)
def test_a_docs_program_runs_and_prints_what_its_page_says(page: str, block: str, request: pytest.FixtureRequest,
                                                          tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    if _needs_ray(block):
        request.getfixturevalue("ray_session")
        import ray

        # joins the session's Ray through RAY_ADDRESS, as `connect()` does on a machine with a running cluster
        env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    result = _run(block, tmp_path, env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = _own_lines(result.stdout)
    expected = _expected_output(page, block)
    if expected is not None:
        assert lines == expected
    if page == "guides/write-your-own-run.md":
        assert lines[0] == "waiting ['count_words']"
        assert lines[1].startswith("resumed ") and lines[-3].startswith("finished ")
        assert lines[-2:] == ['complete {"words": 5} 2', "[4, 5, 6]"]


# --- the reference pages stay complete --------------------------------------------------------


def _variables_in(*dirs: str) -> set[str]:
    found: set[str] = set()
    for directory in dirs:
        for path in (ROOT / directory).rglob("*.py"):
            found |= set(_VARIABLE.findall(path.read_text(encoding="utf-8", errors="replace")))
    return found


def test_the_configuration_page_names_every_soloist_variable_the_code_reads():
    documented = set(_VARIABLE.findall(CONFIGURATION.read_text()))
    missing = sorted(_variables_in(*CODE_DIRS) - documented)
    assert not missing, f"add these to docs/configuration.md (default and meaning): {missing}"


def test_the_configuration_page_names_no_variable_the_code_no_longer_reads():
    documented = set(_VARIABLE.findall(CONFIGURATION.read_text()))
    stale = sorted(documented - _variables_in(*CODE_DIRS, "tests"))
    assert not stale, f"docs/configuration.md lists variables nothing reads: {stale}"


def test_the_approvals_page_shows_the_run_commands():
    text = (DOCS / "concepts" / "approvals.md").read_text()
    for command in ("soloist approve RUN", "soloist run --resume RUN", "soloist history RUN", "soloist fork RUN --at N",
                    "soloist gc --store PATH --older-than"):
        assert command in text


# --- the README stays an introduction ---------------------------------------------------------


def test_the_readme_is_at_most_250_lines():
    assert len(README.read_text().splitlines()) <= 250


def test_the_readmes_links_point_at_files_that_exist():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    relative = [link for link in links if "://" not in link]
    assert relative, "the README links into the docs"
    missing = [link for link in relative if not (ROOT / link).exists()]
    assert not missing, missing
