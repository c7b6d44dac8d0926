"""The benchmark code runs end to end at its smallest configuration, so it cannot rot.

These tests assert the structure of the report and that every ratio is a positive finite
number; never timings (absolute numbers on a shared machine mean nothing in a test).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path

import pytest

from benchmarks import BenchReport, measure_names, preset, run_benchmarks_async
from benchmarks.config import BenchConfig
from cluster.cli import main

pytestmark = [pytest.mark.ray, pytest.mark.multinode, pytest.mark.timeout(900)]

# Measures that skip (with a reason) where an optional piece is missing: LangGraph (the
# ``bench`` extra) for the peer, /proc (Linux) for peak memory.
_MAY_SKIP = {
    "peer_langgraph": importlib.util.find_spec("langgraph") is None,
    "memory": not os.path.exists("/proc/self/status"),
}

# Figures every measure produces at the smallest configuration.
_EXPECTED_FIGURES = {
    "apply_throughput": 3,
    "snapshot_latency": 1,
    "handoff_overhead": 2,
    "parallel_efficiency": 2,
    "peer_langgraph": 3,
    "memory": 2,
    "recovery": 1,
    "observability_cost": 3,
    "scaling_runs": 2,
    "scaling_nodes": 1,
}


@pytest.fixture(scope="module")
async def report(ray_module: None) -> BenchReport:
    return await run_benchmarks_async(preset("smallest"))


def test_every_measure_runs_without_error_at_the_smallest_configuration(report: BenchReport) -> None:
    assert [m.name for m in report.measures] == measure_names()
    assert [(m.name, m.error) for m in report.measures if m.error] == []
    assert [m.name for m in report.measures if m.skipped] == [name for name, missing in _MAY_SKIP.items() if missing]


def test_every_measure_reports_its_figures(report: BenchReport) -> None:
    expected = {name: 0 if _MAY_SKIP.get(name) else n for name, n in _EXPECTED_FIGURES.items()}
    assert {m.name: len(m.figures) for m in report.measures} == expected
    for measure in report.measures:
        assert all(f.measure == measure.name for f in measure.figures)


def test_every_ratio_is_a_positive_finite_number(report: BenchReport) -> None:
    bad = [(f.measure, f.name, f.ratio) for f in report.figures() if not (math.isfinite(f.ratio) and f.ratio > 0)]
    assert bad == []
    assert all(f.value > 0 and f.baseline > 0 for f in report.figures())


def test_the_report_records_the_machine_and_round_trips_through_json(report: BenchReport) -> None:
    assert report.mode == "smallest" and report.cores >= 1 and report.ray_version
    again = BenchReport.model_validate_json(report.model_dump_json())
    assert again == report
    assert "ratio" in json.loads(report.model_dump_json())["measures"][0]["figures"][0]


def test_targets_mark_only_the_figures_that_miss_them(report: BenchReport) -> None:
    for f in report.figures():
        if f.target is None:
            assert not f.poor
        elif f.better == "higher":
            assert f.poor == (f.ratio < f.target)
        else:
            assert f.poor == (f.ratio > f.target)


def test_presets_keep_the_sizes_the_issue_names() -> None:
    full, quick = preset("full"), preset("quick")
    for cfg in (full, quick):
        assert cfg.snapshot_sizes == (10, 1_000, 100_000)
        assert (cfg.fanout_calls, cfg.fanout_sleep_s) == (40, 0.1)
        assert cfg.scaling_nodes == (1, 2, 3) and cfg.scaling_runs == (1, 2, 4, 8)
        assert cfg.memory_messages == 100_000
    assert full.recovery_changes == 100_000
    with pytest.raises(ValueError, match="unknown benchmark mode"):
        preset("huge")  # type: ignore[arg-type]
    assert isinstance(preset("smallest"), BenchConfig)


def test_bench_command_rejects_an_unknown_measure_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--only", "apply_throughput,warp_speed"]) == 2
    assert "warp_speed" in capsys.readouterr().err


def test_bench_command_writes_json_and_plots(report: BenchReport, tmp_path: Path) -> None:
    from rich.console import Console

    from cluster.cli import render_table, write_outputs

    console = Console(record=True, width=200)
    written = write_outputs(report, str(tmp_path), console)
    assert tmp_path / "bench-smallest.json" in written
    assert BenchReport.model_validate_json((tmp_path / "bench-smallest.json").read_text()) == report
    plots = sorted(p.name for p in written if p.suffix == ".png")
    if importlib.util.find_spec("matplotlib") is None:
        assert plots == [] and "matplotlib is not installed" in console.export_text(clear=False)
    else:
        assert plots == sorted(f"bench-smallest-{m.name}.png" for m in report.measures if m.figures)
    render_table(console, report)
    text = console.export_text()
    for f in report.figures():
        assert f.name in text and f"{f.ratio:.3f}" in text
