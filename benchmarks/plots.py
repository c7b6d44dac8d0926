"""PNG plots of a report, one per measure: soloist beside its baseline, and the ratio.

matplotlib is optional (the ``bench`` extra): without it nothing is drawn and the caller is
told why. The Agg backend is used, so no display is needed.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.results import BenchReport, MeasureResult

__all__ = ["write_plots"]


def write_plots(report: BenchReport, directory: Path) -> tuple[list[Path], str | None]:
    """One PNG per measure with figures, in ``directory``; ``(paths, None)`` or ``([], why not)``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "matplotlib is not installed"
    written: list[Path] = []
    for measure in report.measures:
        if not measure.figures:
            continue
        path = directory / f"bench-{report.mode}-{measure.name}.png"
        fig = _draw(plt, measure, report)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written, None


def _draw(plt: object, measure: MeasureResult, report: BenchReport) -> object:
    """Horizontal bars of each figure's ratio, annotated with both absolute values (units differ
    between figures, so only the ratio shares an axis); the target is a black mark."""
    figures = measure.figures
    rows = list(range(len(figures)))
    fig, ax = plt.subplots(figsize=(11, 0.7 * len(figures) + 1.8))  # type: ignore[attr-defined]
    colors = ["tab:red" if f.poor else ("tab:green" if f.target is not None else "tab:blue") for f in figures]
    errors = [[max(f.ratio - f.ratio_min, 0.0) for f in figures], [max(f.ratio_max - f.ratio, 0.0) for f in figures]]
    ax.barh(rows, [f.ratio for f in figures], color=colors, xerr=errors, capsize=3)
    ax.axvline(1.0, color="grey", linewidth=1, linestyle="--")
    for r, f in zip(rows, figures):
        if f.target is not None:
            ax.plot([f.target, f.target], [r - 0.45, r + 0.45], color="black", linewidth=2)
        ax.annotate(f" {f.ratio:.2f} [{f.spread()}]  ({f.value:.3g} vs {f.baseline:.3g} {f.unit}; {f.better} is better)",
                    (max(f.ratio_max, 0.0), r), va="center", fontsize=8)
    ax.set_yticks(rows, [f"{f.name}\nvs {f.baseline_name}" for f in figures], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max([f.ratio_max for f in figures] + [f.target or 0 for f in figures] + [1.0]) * 1.6)
    ax.set_xlabel("median ratio soloist / baseline over interleaved rounds, whiskers min-max (black mark: the issue's target)")
    ax.set_title(f"{measure.title}\n{report.started_at}, commit {report.commit}, {report.cores} cores, mode {report.mode}", fontsize=9)
    fig.tight_layout()
    return fig
