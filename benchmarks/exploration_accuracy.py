"""(10) Exploration accuracy: does ``soloist run`` answer "where is X defined and who imports it?"

Runs the main job as a person would (``soloist run QUESTION --root PACKAGE --json``, one
process per question) on third-party packages installed beside soloist, and scores the
JSON it prints against an independent ``ast`` reading of the same files
(``benchmarks._import_truth``, which shares no code with soloist's skills):

* **definition found**: the exact ``file:line`` of the symbol's definition is reported;
* **importer recall**: the modules reported as importing the symbol (or its module) over
  those that do;
* **edge precision**: the share of the edges given as the answer that are true importers;
* **wall time**: of the whole command, Ray's start-up included (or not, when a cluster
  started by ``soloist up`` is running), and the run itself. The full run asks each question
  with an embedded Ray of its own, as a person would; the quick and smallest presets join the
  bench's running Ray (``--address``), so their wall time excludes Ray's start-up.

Targets (issue 16): every definition, recall >= 0.95, precision >= 0.9. Run it alone with
``python -m benchmarks.exploration_accuracy`` (prints the per-package table).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from typing import Any

import ray
from pydantic import BaseModel, ConfigDict

from benchmarks._harness import BenchContext
from benchmarks._import_truth import PackageTruth, truth_for
from benchmarks.results import Figure, MeasureResult

__all__ = ["NAME", "TITLE", "PACKAGES", "PackageScore", "question_for", "run", "score_package", "steps", "table"]

NAME = "exploration_accuracy"
TITLE = "soloist run on installed packages: definitions, importer recall and edge precision vs an ast reading"

#: (package, symbol): packages that ``pip install -e ".[test]"`` installs, each symbol defined once.
PACKAGES: tuple[tuple[str, str], ...] = (
    ("requests", "HTTPAdapter"),
    ("pydantic", "TypeAdapter"),
    ("rich", "Console"),
    ("httpcore", "ConnectionPool"),
    ("prometheus_client", "CollectorRegistry"),
    ("click", "Context"),
    ("yaml", "SafeLoader"),
    ("starlette", "Request"),
    ("urllib3", "HTTPConnectionPool"),
    ("jsonschema", "ValidationError"),
    ("pygments", "RegexLexer"),
    ("uvicorn", "Config"),
)

_BY_MODE = {"full": len(PACKAGES), "quick": 1, "smallest": 1}  # each question is a fresh `soloist run` (its own Ray)
_SMALLEST = ("yaml",)
_RUN_TIMEOUT_S = 600.0
_LAUNCH = "import sys; from cluster.cli import main; sys.exit(main())"


class PackageScore(BaseModel):
    """One question's result against the ground truth."""

    model_config = ConfigDict(frozen=True)

    package: str
    symbol: str
    files: int
    definition_found: bool
    extra_definitions: int
    """Places reported as definitions of the symbol that are not (re-exports, say)."""
    importers_found: int
    importers_expected: int
    edges_reported: int
    edges_correct: int
    json_clean: bool
    """stdout was exactly one JSON document (``json.loads(stdout)`` worked)."""
    exit_code: int
    wall_seconds: float
    run_seconds: float
    error: str | None = None

    @property
    def recall(self) -> float:
        return 1.0 if self.importers_expected == 0 else self.importers_found / self.importers_expected

    @property
    def precision(self) -> float:
        return math.nan if self.edges_reported == 0 else self.edges_correct / self.edges_reported


def question_for(symbol: str) -> str:
    return f"Where is `{symbol}` defined and who imports it?"


def package_root(package: str) -> str | None:
    """The installed directory of ``package`` beside soloist, or None when it is absent."""
    for key in ("purelib", "platlib"):
        path = os.path.join(sysconfig.get_paths()[key], package)
        if os.path.isfile(os.path.join(path, "__init__.py")):
            return path
    return None


def _parse_stdout(stdout: str) -> tuple[dict[str, Any] | None, bool]:
    """(document, clean): clean when stdout is exactly one JSON document."""
    try:
        return json.loads(stdout), True
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    for index, line in enumerate(stdout.splitlines(keepends=True)):
        if line.startswith("{"):
            offset = sum(len(part) for part in stdout.splitlines(keepends=True)[:index])
            try:
                return decoder.raw_decode(stdout, offset)[0], False
            except ValueError:
                continue
    return None, False


def _answer_edges(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The edges given as the answer: ``importers`` when the report has them, else every edge."""
    if isinstance(summary.get("importers"), dict):  # grouped by target symbol
        return [e for group in summary["importers"].values() for e in group]
    if isinstance(summary.get("importers"), list):
        return summary["importers"]
    return list(summary.get("imports", []))


def score_package(package: str, symbol: str, truth: PackageTruth, stdout: str, exit_code: int,
                  wall_seconds: float) -> PackageScore:
    """Score one ``soloist run --json`` output against ``truth``."""
    doc, clean = _parse_stdout(stdout)
    empty = dict(package=package, symbol=symbol, files=truth.files, importers_expected=len(truth.importers),
                 json_clean=clean, exit_code=exit_code, wall_seconds=wall_seconds)
    if doc is None:
        return PackageScore(definition_found=False, extra_definitions=0, importers_found=0, edges_reported=0,
                            edges_correct=0, run_seconds=math.nan, error="no JSON document on stdout", **empty)
    outcome = doc.get("outcome", {})
    summary = outcome.get("state", {}).get("summary") or {}
    refs = {d["ref"] for d in summary.get("definitions", []) if d.get("symbol") == symbol}
    edges = _answer_edges(summary)
    targets = {truth.defining_module, *truth.reexporters}
    correct = [
        e for e in edges
        if e.get("importer") in truth.importers
        and (e.get("imported") in targets or str(e.get("imported", "")).rpartition(".")[0] in targets)
    ]
    return PackageScore(
        definition_found=bool(set(truth.definitions) & refs),
        extra_definitions=len(refs - set(truth.definitions)),
        importers_found=len({e["importer"] for e in correct}),
        edges_reported=len(edges),
        edges_correct=len(correct),
        run_seconds=float(outcome.get("wall_seconds", math.nan)),
        error=None if outcome.get("status") == "complete" else f"run ended {outcome.get('status')}: {outcome.get('reason')}",
        **empty,
    )


def run_question(package: str, symbol: str, root: str, *, soloist_home: str | None = None,
                 on_score: Any = None, address: str | None = None) -> PackageScore:
    """Run ``soloist run`` on one package in a fresh process and score what it prints.

    ``soloist_home`` is the ``SOLOIST_HOME`` the command sees (where ``soloist up`` records
    its cluster); None keeps the caller's. ``address``: a running Ray for the command to
    join (``--address``) instead of starting its own."""
    truth = truth_for(root, symbol)
    env = dict(os.environ)
    if soloist_home is not None:
        env["SOLOIST_HOME"] = soloist_home
    with tempfile.TemporaryDirectory(prefix="soloist-accuracy-") as cwd:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", _LAUNCH, "run", question_for(symbol), "--root", root, "--json",
             *(["--address", address] if address else [])],
            cwd=cwd, capture_output=True, text=True, timeout=_RUN_TIMEOUT_S, env=env,
        )
        wall = time.perf_counter() - started
    score = score_package(package, symbol, truth, done.stdout, done.returncode, wall)
    if score.error and done.returncode != 0 and "no JSON" in score.error:
        tail = done.stderr.strip().splitlines()[-1:] or [""]
        score = score.model_copy(update={"error": f"{score.error}; exit {done.returncode}: {tail[0][:200]}"})
    if on_score is not None:
        on_score(score)
    return score


def selected(mode: str) -> list[tuple[str, str]]:
    if mode == "smallest":
        return [p for p in PACKAGES if p[0] in _SMALLEST]
    return list(PACKAGES[: _BY_MODE.get(mode, len(PACKAGES))])


def steps(ctx: BenchContext) -> int:
    return len(selected(ctx.config.mode))


def table(scores: list[PackageScore]) -> str:
    """The per-package table as Markdown, with a closing line of means and medians."""
    lines = [
        "| package | symbol | files | definition found | extra defs | importers found/expected | recall | "
        "edge precision | json clean | wall s | run s |",
        "|---|---|---:|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for s in scores:
        precision = "n/a" if math.isnan(s.precision) else f"{s.precision:.2f}"
        lines.append(
            f"| {s.package} | `{s.symbol}` | {s.files} | {'yes' if s.definition_found else '**no**'} | "
            f"{s.extra_definitions} | {s.importers_found}/{s.importers_expected} | {s.recall:.2f} | {precision} | "
            f"{'yes' if s.json_clean else '**no**'} | {s.wall_seconds:.1f} | {s.run_seconds:.1f} |"
            + (f" {s.error}" if s.error else "")
        )
    if scores:
        precisions = [s.precision for s in scores if not math.isnan(s.precision)]
        lines.append(
            f"| **all** | | | {sum(s.definition_found for s in scores)}/{len(scores)} | "
            f"{sum(s.extra_definitions for s in scores)} | {sum(s.importers_found for s in scores)}/"
            f"{sum(s.importers_expected for s in scores)} | mean {statistics.fmean(s.recall for s in scores):.2f} | "
            f"mean {statistics.fmean(precisions) if precisions else math.nan:.2f} | "
            f"{sum(s.json_clean for s in scores)}/{len(scores)} | median {statistics.median(s.wall_seconds for s in scores):.1f} | "
            f"median {statistics.median(s.run_seconds for s in scores):.1f} |"
        )
    return "\n".join(lines)


def evaluate(packages: list[tuple[str, str]], on_step: Any = None, on_score: Any = None,
             address: str | None = None) -> tuple[list[PackageScore], list[str]]:
    """Score every installed package of ``packages``; the names of the missing ones beside.
    ``address``: a running Ray every question joins (None: each starts its own)."""
    scores: list[PackageScore] = []
    missing: list[str] = []
    for package, symbol in packages:
        root = package_root(package)
        if root is None:
            missing.append(package)
            continue
        if on_step is not None:
            on_step(f"{package}: {symbol}")
        scores.append(run_question(package, symbol, root, on_score=on_score, address=address))
    return scores, missing


async def run(ctx: BenchContext) -> MeasureResult:
    # Quick and smallest join the bench's Ray: Ray's start-up is the same fixed cost for every
    # question, and the full run keeps it in (one embedded Ray per question).
    address = None if ctx.config.mode == "full" else ray.get_runtime_context().gcs_address
    scores, missing = await asyncio.to_thread(evaluate, selected(ctx.config.mode), ctx.step, None, address)
    if not scores:
        return MeasureResult(name=NAME, title=TITLE, skipped=f"none of the packages is installed: {', '.join(missing)}")
    precisions = [s.precision for s in scores if not math.isnan(s.precision)]
    figures = [
        Figure(measure=NAME, name="definitions found", values=[sum(s.definition_found for s in scores)],
               baselines=[len(scores)], baseline_name="questions asked", unit="questions", better="higher", target=1.0),
        Figure(measure=NAME, name="importer recall, mean over packages", values=[statistics.fmean(s.recall for s in scores)],
               baselines=[1.0], baseline_name="every importer (ast ground truth)", unit="", better="higher", target=0.95),
        Figure(measure=NAME, name="edge precision, mean over packages",
               values=[statistics.fmean(precisions) if precisions else 0.0], baselines=[1.0],
               baseline_name="every answer edge a true importer", unit="", better="higher", target=0.9),
        Figure(measure=NAME, name="wall time of soloist run, per question", values=[s.wall_seconds for s in scores],
               baselines=[s.run_seconds for s in scores], baseline_name="time inside the run, same question",
               unit="s", better="lower"),
    ]
    notes = [table(scores).replace("\n", " / ")]
    if missing:
        notes.append(f"not installed, skipped: {', '.join(missing)}")
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)


def _echo(label: str) -> Any:
    """A callback printing each score as one JSON line on stderr, as soon as it is known."""
    return lambda score: print(f"{label} {score.model_dump_json()}", file=sys.stderr, flush=True)


def compare_cluster(packages: list[tuple[str, str]], on_step: Any = None) -> tuple[list[PackageScore], list[PackageScore], float]:
    """Each question twice, back to back so both see the same machine load: once starting an
    embedded Ray, once joining a cluster started by ``soloist up``; and how long ``up`` took."""
    with tempfile.TemporaryDirectory(prefix="soloist-home-up-") as up_home, \
            tempfile.TemporaryDirectory(prefix="soloist-home-none-") as no_home:
        launch = [sys.executable, "-c", _LAUNCH]
        env = {**os.environ, "SOLOIST_HOME": up_home}
        started = time.perf_counter()
        subprocess.run([*launch, "up"], env=env, check=True, capture_output=True, text=True, timeout=_RUN_TIMEOUT_S)
        up_seconds = time.perf_counter() - started
        embedded: list[PackageScore] = []
        joined: list[PackageScore] = []
        try:
            for package, symbol in packages:
                root = package_root(package)
                if root is None:
                    continue
                if on_step is not None:
                    on_step(f"{package}: {symbol}")
                embedded.append(run_question(package, symbol, root, soloist_home=no_home, on_score=_echo("embedded")))
                joined.append(run_question(package, symbol, root, soloist_home=up_home, on_score=_echo("joined")))
        finally:
            subprocess.run([*launch, "down"], env=env, capture_output=True, text=True, timeout=_RUN_TIMEOUT_S)
    return embedded, joined, up_seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.exploration_accuracy", description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=None, help="comma-separated package names (default: all twelve)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the scores as JSON here")
    parser.add_argument("--compare-cluster", action="store_true",
                        help="ask every question twice: with an embedded Ray, and joining a cluster from `soloist up`")
    args = parser.parse_args(argv)
    chosen = list(PACKAGES)
    if args.only:
        wanted = set(args.only.split(","))
        chosen = [p for p in PACKAGES if p[0] in wanted]
    progress = lambda text: print(f"... {text}", file=sys.stderr, flush=True)  # noqa: E731
    if args.compare_cluster:
        embedded, joined, up_seconds = compare_cluster(chosen, progress)
        print("Without a running cluster (each run starts an embedded Ray):\n")
        print(table(embedded))
        print(f"\nJoining the cluster of `soloist up` (which took {up_seconds:.1f}s once):\n")
        print(table(joined))
        if embedded:
            print(f"\nmedian wall time: {statistics.median(s.wall_seconds for s in embedded):.1f}s without, "
                  f"{statistics.median(s.wall_seconds for s in joined):.1f}s with a running cluster")
        if args.json:
            with open(args.json, "w", encoding="utf-8") as handle:
                json.dump({"embedded": [s.model_dump() for s in embedded], "joined": [s.model_dump() for s in joined],
                           "up_seconds": up_seconds}, handle, indent=2)
        return 0
    scores, missing = evaluate(chosen, progress, _echo("embedded"))
    print(table(scores))
    if missing:
        print(f"\nnot installed, skipped: {', '.join(missing)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump([s.model_dump() for s in scores], handle, indent=2)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
