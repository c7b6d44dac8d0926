"""The result models of a benchmark run: figures, measures and the whole report.

Every figure is a *ratio* to a baseline measured in the same run, because absolute times on
a shared machine drift from one minute to the next. soloist and its baseline are measured
round by round, interleaved, and a figure keeps every round: the reported ratio is the
**median** of the per-round ratios, with their min-max spread, never one lucky round. The
absolute values (medians over rounds) are kept beside it for context. ``better`` says which
direction is good, ``target`` (when set) is the bar the issue sets, and ``poor`` flags a
figure whose median misses it.
"""

from __future__ import annotations

import math
import statistics
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

__all__ = ["Figure", "MeasureResult", "BenchReport", "Better", "compare_reports"]

Better = Literal["higher", "lower"]


class Figure(BaseModel):
    """One measured value beside its same-run baseline, round by round, and their ratio."""

    model_config = ConfigDict(frozen=True)

    measure: str
    name: str
    """What was measured, e.g. ``"apply, no store"``."""
    values: list[float] = Field(min_length=1)
    """soloist's number in each round, in ``unit``."""
    baselines: list[float] = Field(min_length=1)
    """The baseline's number in each round (same length as ``values``), measured in the same run;
    a fixed baseline (an ideal) is repeated."""
    baseline_name: str
    """What the baseline is, e.g. ``"raw actor call with the same payload, pipelined"``."""
    unit: str
    better: Better
    """Which direction of ``ratio`` is good."""
    target: float | None = None
    """The bar the issue sets for ``ratio`` (a floor when ``better`` is higher, else a ceiling)."""
    params: dict[str, float | int | str] = Field(default_factory=dict)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def value(self) -> float:
        """Median of soloist's rounds."""
        return statistics.median(self.values)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def baseline(self) -> float:
        """Median of the baseline's rounds."""
        return statistics.median(self.baselines)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ratios(self) -> list[float]:
        """``value / baseline`` of each round (NaN where a baseline is zero: reported, never hidden)."""
        return [v / b if b else math.nan for v, b in zip(self.values, self.baselines)]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ratio(self) -> float:
        """The median of the per-round ratios."""
        finite = [r for r in self.ratios if math.isfinite(r)]
        return statistics.median(finite) if finite else math.nan

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ratio_min(self) -> float:
        finite = [r for r in self.ratios if math.isfinite(r)]
        return min(finite) if finite else math.nan

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ratio_max(self) -> float:
        finite = [r for r in self.ratios if math.isfinite(r)]
        return max(finite) if finite else math.nan

    @computed_field  # type: ignore[prop-decorator]
    @property
    def poor(self) -> bool:
        """True when the median ratio misses ``target``."""
        if self.target is None or not math.isfinite(self.ratio):
            return False
        return self.ratio < self.target if self.better == "higher" else self.ratio > self.target

    def spread(self) -> str:
        """``min-max`` of the per-round ratios, at the precision they deserve."""
        if len(self.values) == 1:
            return "1 round"
        return f"{fmt_ratio(self.ratio_min)}–{fmt_ratio(self.ratio_max)}"


class MeasureResult(BaseModel):
    """The figures of one measure, how long it took, and notes (or why it was skipped)."""

    model_config = ConfigDict(frozen=True)

    name: str
    title: str
    figures: list[Figure] = Field(default_factory=list)
    seconds: float = 0.0
    load_average: tuple[float, float, float] | None = None
    """The machine's 1/5/15-minute load average when the measure ended (other work on the machine)."""
    notes: list[str] = Field(default_factory=list)
    skipped: str | None = None
    """Why the measure did not run (a missing optional package, say); None when it ran."""
    error: str | None = None
    """The exception that stopped the measure (type and message); None when it completed."""


class BenchReport(BaseModel):
    """A whole run: where, when and on which commit it ran, in which mode, and every result."""

    model_config = ConfigDict(frozen=True)

    mode: str
    started_at: str
    """ISO-8601 UTC time the run started."""
    commit: str = "unknown"
    """The source commit measured (``git describe --always --dirty``), or ``unknown``."""
    seconds: float
    cores: int
    """``os.cpu_count()`` of the machine that ran the benchmarks."""
    load_average: tuple[float, float, float] | None = None
    """1/5/15-minute load average when the run started."""
    python: str
    ray_version: str
    platform: str
    measures: list[MeasureResult]

    def figures(self) -> list[Figure]:
        """Every figure of every measure, in run order."""
        return [f for m in self.measures for f in m.figures]

    def errors(self) -> list[MeasureResult]:
        """The measures that failed."""
        return [m for m in self.measures if m.error is not None]

    def poor(self) -> list[Figure]:
        """The figures that miss their target."""
        return [f for f in self.figures() if f.poor]

    def header(self) -> str:
        load = "" if self.load_average is None else f", load average {_load(self.load_average)} at start"
        return (f"Mode `{self.mode}`, commit `{self.commit}`, started {self.started_at}, {self.cores} cores{load}, "
                f"Python {self.python}, Ray {self.ray_version}, {self.seconds:.0f} s in all.")

    def to_markdown(self) -> str:
        """The whole results section as Markdown: header, table and notes (pasted unedited into
        ``benchmarks/README.md``)."""
        lines = [
            self.header(),
            "",
            "| measure | figure | soloist | baseline | ratio (median) | spread (min–max) | rounds | better | target | baseline is |",
            "|---|---|---:|---:|---:|---:|---:|---|---:|---|",
        ]
        for m in self.measures:
            if m.error or m.skipped:
                lines.append(f"| {m.name} | {'failed' if m.error else 'skipped'} | | | | | | | | {m.error or m.skipped} |")
            for f in m.figures:
                ratio = f"**{fmt_ratio(f.ratio)}** (misses)" if f.poor else fmt_ratio(f.ratio)
                lines.append(f"| {m.name} | {f.name} | {fmt_num(f.value)} {f.unit} | {fmt_num(f.baseline)} {f.unit} | {ratio} | "
                             f"{f.spread()} | {len(f.values)} | {f.better} | {fmt_target(f)} | {f.baseline_name} |")
        lines += ["", "| measure | seconds | load average (1/5/15 min) at its end |", "|---|---:|---|"]
        lines += [f"| {m.name} | {m.seconds:.0f} | {_load(m.load_average) if m.load_average else ''} |" for m in self.measures]
        notes = [f"- {m.name}: {note}" for m in self.measures for note in m.notes]
        return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def compare_reports(before: BenchReport, after: BenchReport) -> list[tuple[str, str, float | None, float | None, float | None]]:
    """Per figure (by measure and name): ``(measure, figure, ratio before, ratio after, after / before)``.

    A figure present in only one report has None on the other side.
    """
    old = {(f.measure, f.name): f for f in before.figures()}
    new = {(f.measure, f.name): f for f in after.figures()}
    keys = list(old) + [k for k in new if k not in old]
    rows = []
    for key in keys:
        a, b = old.get(key), new.get(key)
        ra, rb = (a.ratio if a else None), (b.ratio if b else None)
        change = rb / ra if ra and rb is not None and math.isfinite(ra) and math.isfinite(rb) else None
        rows.append((key[0], key[1], ra, rb, change))
    return rows


def fmt_ratio(value: float) -> str:
    """Ratios at two significant decimals (rounds on a shared machine differ by more than that)."""
    if not math.isfinite(value):
        return str(value)
    return f"{value:.2f}"


def fmt_target(f: Figure) -> str:
    if f.target is None:
        return ""
    return ("≥ " if f.better == "higher" else "≤ ") + f"{f.target:.2f}"


def fmt_num(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _load(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{x:.1f}" for x in load)
