"""``python -m benchmarks`` (what ``soloist bench`` runs): the benchmarks with progress bars,
the ratios, JSON and plots.

A thin shell over ``benchmarks.run_benchmarks``: it parses the options, shows a rich
progress bar per measure, prints one table of every figure (value, baseline, ratio, and the
issue's target where there is one), and with ``--out DIR`` writes ``bench-<mode>.json``,
``bench-<mode>.md`` (the results section of ``benchmarks/README.md``, generated whole) and,
when matplotlib is installed (the ``bench`` extra), one PNG per measure. ``--compare A B``
prints, per figure, how the ratio moved from one saved run to another.

The benchmark code is the ``benchmarks`` package of the source checkout; it does not ship in
the wheel. ``soloist bench ARGS`` runs ``python -m benchmarks ARGS`` from that checkout.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

import benchmarks
from cluster import configure_logging
from benchmarks.plots import write_plots
from benchmarks.results import compare_reports

__all__ = ["build_parser", "main", "render_table", "render_comparison", "write_outputs"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    """The options of ``python -m benchmarks`` (and so of ``soloist bench``)."""
    bench = argparse.ArgumentParser(
        prog="soloist bench",
        description="Run soloist's benchmarks. Every figure is a ratio to a baseline measured in the same run "
        "(raw Ray, an ideal, or LangGraph), because absolute times on a shared machine drift.",
    )
    bench.add_argument("--quick", action="store_true", help="smaller call counts and journal (about two minutes on 2 cores)")
    bench.add_argument("--out", default=None, metavar="DIR", help="write bench-<mode>.json and PNG plots (matplotlib) here")
    bench.add_argument("--only", default=None, metavar="NAMES",
                       help="comma-separated measures to run (default: all); e.g. apply_throughput,handoff_overhead")
    bench.add_argument("--markdown", default=None, metavar="FILE",
                       help="write the results section (header, table, notes) as Markdown; '-' prints it")
    bench.add_argument("--compare", nargs=2, default=None, metavar=("A.json", "B.json"),
                       help="run nothing: print each figure's ratio in two saved runs and its change (B / A)")
    bench.add_argument("--log-format", choices=("text", "json"), default="text", help="log records as text or JSON (stderr)")
    bench.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="default: WARNING")
    return bench


def _console(*, stderr: bool = False) -> Console:
    """A terminal is wrapped at its width; a pipe or file keeps whole lines (like ``soloist``)."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, soft_wrap=True, width=None if os.environ.get("COLUMNS") else _TABLE_WIDTH)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m benchmarks``; returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return int(exc.code or 0)
    configure_logging(args.log_format, args.log_level)
    return _cmd_bench(args, _console(), _console(stderr=True))


class _Bars:
    """One progress bar per measure. The runner announces each step as it starts, so a bar
    shows the steps finished so far and the name of the one running."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._tasks: dict[str, TaskID] = {}
        self._started: dict[str, int] = {}  # steps announced so far, per measure
        self._totals: dict[str, int] = {}

    def begin(self, name: str, title: str, steps: int) -> None:
        self._totals[name] = max(steps, 1)
        self._tasks[name] = self._progress.add_task(name, total=self._totals[name], step="starting")
        self._started[name] = 0

    def advance(self, name: str, text: str) -> None:
        if name in self._tasks:
            self._started[name] += 1
            self._progress.update(self._tasks[name], completed=self._started[name] - 1, step=text)

    def end(self, name: str) -> None:
        if name in self._tasks:
            self._progress.update(self._tasks[name], completed=self._totals[name], step="done")


def _fmt(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


_TABLE_WIDTH = 160  # wide enough for one line per figure, also when stdout is not a terminal


def render_table(console: Console, report: Any) -> None:
    """Print every figure of ``report`` as one table (a section per measure), then the notes."""
    table = Table(title=f"soloist bench ({report.mode}) - commit {report.commit} - {report.started_at} - {report.cores} cores - "
                        f"Ray {report.ray_version}",
                  caption="ratio = median over interleaved rounds of soloist / baseline; red: misses the issue's target")
    for column, justify in (("measure / figure", "left"), ("soloist", "right"), ("baseline", "right"),
                            ("ratio", "right"), ("spread", "right"), ("better", "left"), ("target", "right"), ("baseline is", "left")):
        # A figure's name stays on one line (it is what a reader searches for); "baseline is" wraps instead.
        table.add_column(column, justify=justify, no_wrap=column == "measure / figure")  # type: ignore[arg-type]
    for measure in report.measures:
        if measure.error or measure.skipped:
            state = "[red]failed[/]" if measure.error else "[yellow]skipped[/]"
            table.add_row(f"[bold]{measure.name}[/] {state}", "", "", "", "", "", "", measure.error or measure.skipped)
            table.add_section()
            continue
        load = "" if measure.load_average is None else f" (load {measure.load_average[0]:.1f})"
        table.add_row(f"[bold]{measure.name}[/]{load}", "", "", "", "", "", "", "")
        for f in measure.figures:
            target = "" if f.target is None else ("≥ " if f.better == "higher" else "≤ ") + _fmt(f.target)
            ratio = f"[red]{f.ratio:.2f}[/]" if f.poor else f"{f.ratio:.2f}"
            table.add_row(f"  {f.name}", f"{_fmt(f.value)} {f.unit}", f"{_fmt(f.baseline)} {f.unit}", ratio, f.spread(), f.better,
                          target, f.baseline_name)
        table.add_section()
    width = console.width
    console.width = max(width, _TABLE_WIDTH)  # print() can only narrow a console, never widen it
    try:
        console.print(table)
        for measure in report.measures:
            for note in measure.notes:
                console.print(f"[dim]{measure.name}:[/] {note}")
    finally:
        console.width = width


def render_comparison(console: Console, before: Any, after: Any) -> None:
    """Print every figure's ratio in ``before`` and ``after`` and the change (after / before)."""
    table = Table(title=f"soloist bench: {before.commit} ({before.started_at}) -> {after.commit} ({after.started_at})",
                  caption="change = ratio after / ratio before; > 1 is better for 'higher' figures, worse for 'lower' ones")
    for column, justify in (("measure", "left"), ("figure", "left"), ("ratio before", "right"), ("ratio after", "right"),
                            ("change", "right"), ("better", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    better = {(f.measure, f.name): f.better for f in [*before.figures(), *after.figures()]}
    for measure, name, old, new, change in compare_reports(before, after):
        direction = better[(measure, name)]
        text = "" if change is None else f"{change:.2f}x"
        if change is not None and abs(change - 1) >= 0.05:
            good = (change > 1) == (direction == "higher")
            text = f"[{'green' if good else 'red'}]{text}[/]"
        table.add_row(measure, name, "" if old is None else f"{old:.2f}", "" if new is None else f"{new:.2f}", text, direction)
    width = console.width
    console.width = max(width, _TABLE_WIDTH)
    try:
        console.print(table)
    finally:
        console.width = width


def write_outputs(report: Any, out_dir: str, err: Console) -> list[Path]:
    """Write the JSON report, its Markdown and (with matplotlib) the plots; return the paths written."""
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / f"bench-{report.mode}.json"
    json_path.write_text(report.model_dump_json(indent=2), encoding="utf-8")
    md_path = directory / f"bench-{report.mode}.md"
    md_path.write_text(report.to_markdown(), encoding="utf-8")
    written = [json_path, md_path]
    plots, missing = write_plots(report, directory)
    if missing:
        err.print(f"[yellow]soloist bench: {missing}; plots skipped (pip install 'soloist[bench]')[/]")
    return written + plots


def _load_report(path: str, err: Console) -> Any:
    try:
        return benchmarks.BenchReport.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        err.print(f"[red]soloist bench --compare: cannot read {path}: {exc}[/]")
    except ValidationError as exc:
        err.print(f"[red]soloist bench --compare: {path} is not a report written by this version of soloist bench "
                  f"({exc.error_count()} problem(s), first: {exc.errors()[0]['msg']})[/]")
    return None


def _cmd_bench(args: argparse.Namespace, out: Console, err: Console) -> int:
    if args.compare:
        before, after = (_load_report(p, err) for p in args.compare)
        if before is None or after is None:
            return EXIT_USAGE
        render_comparison(out, before, after)
        return EXIT_OK
    only = [name.strip() for name in args.only.split(",") if name.strip()] if args.only else None
    if only:
        unknown = sorted(set(only) - set(benchmarks.measure_names()))
        if unknown:
            err.print(f"[red]soloist bench: unknown measure(s) {', '.join(unknown)}; choose from {', '.join(benchmarks.measure_names())}[/]")
            return EXIT_USAGE
    config = benchmarks.preset("quick" if args.quick else "full")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    columns = (TextColumn("{task.description:<20}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[step]}"))
    with Progress(*columns, console=err, transient=False) as progress:
        report = benchmarks.run_benchmarks(config, only=only, progress=_Bars(progress))
    render_table(out, report)
    if args.markdown == "-":
        out.print(report.to_markdown(), markup=False, highlight=False, soft_wrap=True)
    elif args.markdown:
        Path(args.markdown).write_text(report.to_markdown(), encoding="utf-8")
        err.print(f"wrote {args.markdown}")
    if args.out:
        for path in write_outputs(report, args.out, err):
            err.print(f"wrote {path}")
    failed = report.errors()
    if failed:
        err.print(f"[red]soloist bench: {len(failed)} measure(s) failed: {', '.join(m.name for m in failed)}[/]")
        return EXIT_FAILED
    return EXIT_OK
