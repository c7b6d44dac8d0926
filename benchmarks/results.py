"""The result models of a benchmark run: figures, measures and the whole report.

Every figure is a *ratio* to a baseline measured in the same run, because absolute times on
a shared machine drift from one minute to the next; the absolute values are kept beside it
for context. ``better`` says which direction is good, ``target`` (when set) is the bar the
issue sets, and ``poor`` flags a figure that misses it.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

__all__ = ["Figure", "MeasureResult", "BenchReport", "Better"]

Better = Literal["higher", "lower"]


class Figure(BaseModel):
    """One measured value beside its same-run baseline, and their ratio (``value / baseline``)."""

    model_config = ConfigDict(frozen=True)

    measure: str
    name: str
    """What was measured, e.g. ``"apply, no store"``."""
    value: float
    """soloist's number, in ``unit``."""
    baseline: float
    """The baseline's number, in ``unit``, measured in the same run."""
    baseline_name: str
    """What the baseline is, e.g. ``"trivial Ray actor method, pipelined"``."""
    unit: str
    better: Better
    """Which direction of ``ratio`` is good."""
    target: float | None = None
    """The bar the issue sets for ``ratio`` (a floor when ``better`` is higher, else a ceiling)."""
    params: dict[str, float | int | str] = Field(default_factory=dict)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ratio(self) -> float:
        """``value / baseline``; NaN when the baseline is zero (reported, never hidden)."""
        if self.baseline == 0:
            return math.nan
        return self.value / self.baseline

    @computed_field  # type: ignore[prop-decorator]
    @property
    def poor(self) -> bool:
        """True when ``ratio`` misses ``target``."""
        if self.target is None or not math.isfinite(self.ratio):
            return False
        return self.ratio < self.target if self.better == "higher" else self.ratio > self.target


class MeasureResult(BaseModel):
    """The figures of one measure, how long it took, and notes (or why it was skipped)."""

    model_config = ConfigDict(frozen=True)

    name: str
    title: str
    figures: list[Figure] = Field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = Field(default_factory=list)
    skipped: str | None = None
    """Why the measure did not run (a missing optional package, say); None when it ran."""
    error: str | None = None
    """The exception that stopped the measure (type and message); None when it completed."""


class BenchReport(BaseModel):
    """A whole run: where and when it ran, in which mode, and every measure's result."""

    model_config = ConfigDict(frozen=True)

    mode: str
    started_at: str
    """ISO-8601 UTC time the run started."""
    seconds: float
    cores: int
    """``os.cpu_count()`` of the machine that ran the benchmarks."""
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

    def to_markdown(self) -> str:
        """The table of every figure as Markdown (what ``benchmarks/README.md`` holds)."""
        lines = [
            f"Mode `{self.mode}`, {self.started_at}, {self.cores} cores, Python {self.python}, Ray {self.ray_version}, "
            f"{self.seconds:.0f} s in all.",
            "",
            "| measure | figure | soloist | baseline | ratio | better | target | baseline is |",
            "|---|---|---:|---:|---:|---|---:|---|",
        ]
        for m in self.measures:
            if m.error or m.skipped:
                lines.append(f"| {m.name} | {'failed' if m.error else 'skipped'} | | | | | | {m.error or m.skipped} |")
            for f in m.figures:
                target = "" if f.target is None else ("≥ " if f.better == "higher" else "≤ ") + f"{f.target:.2f}"
                ratio = f"**{f.ratio:.3f}** (misses)" if f.poor else f"{f.ratio:.3f}"
                lines.append(f"| {m.name} | {f.name} | {_num(f.value)} {f.unit} | {_num(f.baseline)} {f.unit} | {ratio} | "
                             f"{f.better} | {target} | {f.baseline_name} |")
        notes = [f"- {m.name}: {note}" for m in self.measures for note in m.notes]
        return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def _num(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"
