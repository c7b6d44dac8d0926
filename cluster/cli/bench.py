"""``soloist bench``: run the benchmarks with progress bars, print the ratios, save JSON and plots.

A thin shell over ``benchmarks.run_benchmarks``: it parses the options, shows a rich
progress bar per measure, prints one table of every figure (value, baseline, ratio, and the
issue's target where there is one), and with ``--out DIR`` writes ``bench-<mode>.json`` and,
when matplotlib is installed (the ``bench`` extra), one PNG per measure.

The benchmark code is the ``benchmarks`` package, which ships in the distribution.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

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
from benchmarks.plots import write_plots

__all__ = ["add_bench_command", "render_table", "write_outputs"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_bench_command(subparsers: Any) -> None:
    """Register ``soloist bench`` on the ``soloist`` command's subparsers."""
    bench = subparsers.add_parser(
        "bench", help="measure throughput and scaling against raw Ray and LangGraph",
        description="Run soloist's benchmarks. Every figure is a ratio to a baseline measured in the same run "
        "(raw Ray, an ideal, or LangGraph), because absolute times on a shared machine drift.",
    )
    bench.add_argument("--quick", action="store_true", help="smaller call counts and journal (about two minutes on 2 cores)")
    bench.add_argument("--out", default=None, metavar="DIR", help="write bench-<mode>.json and PNG plots (matplotlib) here")
    bench.add_argument("--only", default=None, metavar="NAMES",
                       help="comma-separated measures to run (default: all); e.g. apply_throughput,handoff_overhead")
    bench.add_argument("--log-format", choices=("text", "json"), default="text", help="log records as text or JSON (stderr)")
    bench.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="default: WARNING")
    bench.set_defaults(handler=_cmd_bench)


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
    table = Table(title=f"soloist bench ({report.mode}) - {report.started_at} - {report.cores} cores - Ray {report.ray_version}",
                  caption="ratio = soloist / baseline, same run; red: misses the issue's target")
    for column, justify in (("measure / figure", "left"), ("soloist", "right"), ("baseline", "right"),
                            ("ratio", "right"), ("better", "left"), ("target", "right"), ("baseline is", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for measure in report.measures:
        if measure.error or measure.skipped:
            state = "[red]failed[/]" if measure.error else "[yellow]skipped[/]"
            table.add_row(f"[bold]{measure.name}[/] {state}", "", "", "", "", "", measure.error or measure.skipped)
            table.add_section()
            continue
        table.add_row(f"[bold]{measure.name}[/]", "", "", "", "", "", "")
        for f in measure.figures:
            target = "" if f.target is None else ("≥ " if f.better == "higher" else "≤ ") + _fmt(f.target)
            ratio = f"[red]{f.ratio:.3f}[/]" if f.poor else f"{f.ratio:.3f}"
            table.add_row(f"  {f.name}", f"{_fmt(f.value)} {f.unit}", f"{_fmt(f.baseline)} {f.unit}", ratio, f.better, target,
                          f.baseline_name)
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


def write_outputs(report: Any, out_dir: str, err: Console) -> list[Path]:
    """Write the JSON report and (with matplotlib) the plots; return the paths written."""
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / f"bench-{report.mode}.json"
    json_path.write_text(report.model_dump_json(indent=2), encoding="utf-8")
    written = [json_path]
    plots, missing = write_plots(report, directory)
    if missing:
        err.print(f"[yellow]soloist bench: {missing}; plots skipped (pip install 'soloist[bench]')[/]")
    return written + plots


def _cmd_bench(args: argparse.Namespace, out: Console, err: Console) -> int:
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
    if args.out:
        for path in write_outputs(report, args.out, err):
            err.print(f"wrote {path}")
    failed = report.errors()
    if failed:
        err.print(f"[red]soloist bench: {len(failed)} measure(s) failed: {', '.join(m.name for m in failed)}[/]")
        return EXIT_FAILED
    return EXIT_OK
