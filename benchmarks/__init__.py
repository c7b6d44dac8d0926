"""soloist's benchmarks: every figure beside a baseline measured in the same run, as a ratio.

Run them with ``soloist bench`` (``--quick`` for a short run, ``--out DIR`` for JSON and
plots), or from Python::

    from benchmarks import preset, run_benchmarks
    report = run_benchmarks(preset("quick"))
"""

from benchmarks.config import BenchConfig, Mode, preset
from benchmarks.results import BenchReport, Figure, MeasureResult
from benchmarks.runner import MEASURES, measure_names, run_benchmarks, run_benchmarks_async

__all__ = [
    "BenchConfig",
    "Mode",
    "preset",
    "BenchReport",
    "Figure",
    "MeasureResult",
    "MEASURES",
    "measure_names",
    "run_benchmarks",
    "run_benchmarks_async",
]
