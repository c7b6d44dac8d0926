"""The benchmark code runs end to end at its smallest configuration, so it cannot rot.

These tests assert the structure of the report and that every ratio is a positive finite
number; never timings (absolute numbers on a shared machine mean nothing in a test).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from benchmarks import BenchReport, measure_names, pool_scaling, preset, run_benchmarks_async
from benchmarks.config import BenchConfig
from cluster.cli import main

pytestmark = [pytest.mark.ray, pytest.mark.multinode, pytest.mark.timeout(900)]

# Measures that skip (with a reason) where an optional piece is missing: /proc (Linux) for
# peak memory. LangGraph and matplotlib (the ``bench`` extra) are in the ``test`` extra, so
# the peer measure and the plots always run here and cannot rot.
_MAY_SKIP = {
    "memory": not os.path.exists("/proc/self/status"),
}

# Figures every measure produces at the smallest configuration.
_EXPECTED_FIGURES = {
    "apply_throughput": 4,  # no store vs raw, sync, batch, apply_batch vs apply(fn)
    "snapshot_latency": 1,
    "handoff_overhead": 4,  # warm, cold, idle past the permit linger, parallel
    "parallel_efficiency": 2,
    "peer_langgraph": 4,  # LangGraph vs ideal; sleeping, no-op and CPU-bound fan-outs
    "memory": 2,
    "recovery": 5,  # two journal sizes, without and with checkpoints, and the budget figure
    # per store (SQLite, PostgreSQL): batch and sync vs no store, a run taken up again vs a
    # new one, size after the turns, size with vs without retention, recovery vs a one-change
    # run and vs the budget
    "store_backends": 14,
    "agents": 10,  # per store vs DBOS and vs plain at 0 ms, wall time at 200 ms vs plain, bytes per step vs DBOS
    "observability_cost": 3,
    "multi_driver": 2,
    "scaling_runs": 2,
    "exploration_accuracy": 4,
    # vs the fixed pool (wall, replica-seconds), and vs Ray Serve (wall, replica-seconds) where
    # ``ray[serve]`` imports (the ``bench`` extra; the Serve arm is skipped in a note otherwise)
    "pool_scaling": 2 if pool_scaling.serve_missing() else 4,
    # starts, memory per open and per waiting run, processes, summed applies vs raw and vs one
    # run, apply and handoff latency on a busy host vs a dedicated run; then the runs waiting for
    # an approval: memory per waiting run, starts, processes
    "many_runs": 12,
    "scaling_nodes": 2,  # one node, then a second one added (the path that starts a node)
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


def test_every_figure_keeps_one_soloist_and_one_baseline_number_per_round(report: BenchReport) -> None:
    for f in report.figures():
        assert len(f.values) == len(f.baselines) == len(f.ratios) >= 1
        assert f.ratio_min <= f.ratio <= f.ratio_max


def test_the_ratio_is_the_median_of_per_round_ratios_with_its_spread() -> None:
    from benchmarks import Figure

    f = Figure(measure="m", name="n", values=[10.0, 30.0, 20.0], baselines=[10.0, 10.0, 40.0], baseline_name="b",
               unit="s", better="lower", target=1.5)
    assert f.ratios == [1.0, 3.0, 0.5]
    assert (f.ratio, f.ratio_min, f.ratio_max) == (1.0, 0.5, 3.0)
    assert (f.value, f.baseline) == (20.0, 10.0)
    assert not f.poor and f.spread() == "0.50–3.00"


def test_the_report_records_the_machine_and_round_trips_through_json(report: BenchReport) -> None:
    assert report.mode == "smallest" and report.cores >= 1 and report.ray_version
    assert report.commit and report.started_at and report.load_average is not None
    assert all(m.load_average is not None for m in report.measures)
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
    assert full.snapshot_sizes == (10, 1_000, 100_000)
    assert full.scaling_nodes == (1, 2, 3) and full.scaling_runs == (1, 2, 4, 8)
    assert full.memory_messages == 100_000
    assert full.recovery_changes == (10_000, 100_000) and full.cpu_calls == 40
    # issue 28: 10 runs x 40 calls of 100 ms at cap 4, from 1 replica up to 40, a one-minute window
    assert (full.pool_runs, full.pool_calls_per_run, full.pool_sleep_s, full.pool_max_replicas) == (10, 40, 0.1, 40)
    assert full.pool_window_s == 60.0 and full.pool_downscale_delay_s is None
    # issue 29: 10,000 durable runs, a tenth active, the rest waiting
    assert full.many_runs == 10_000
    # issue 43: 100,000 runs waiting for an approval, 1,000 of them answered
    assert (full.many_waiting_runs, full.many_waiting_answers) == (100_000, 1_000)
    for cfg in (full, quick):  # the quick run keeps the issue's fan-out, CPU-bound skill and two drivers
        assert (cfg.fanout_calls, cfg.fanout_sleep_s) == (40, 0.1)
        assert (cfg.cpu_seconds, cfg.drivers) == (0.1, 2)
        assert cfg.rounds >= 2  # a spread, not one round
    sizes = ("apply_calls", "durable_apply_calls", "handoff_calls", "parallel_calls", "cpu_calls", "memory_messages")
    assert all(getattr(quick, name) <= getattr(full, name) for name in sizes)
    assert max(quick.snapshot_sizes) <= max(full.snapshot_sizes) and max(quick.recovery_changes) <= max(full.recovery_changes)
    with pytest.raises(ValueError, match="unknown benchmark mode"):
        preset("huge")  # type: ignore[arg-type]
    assert isinstance(preset("smallest"), BenchConfig)


def test_bench_command_rejects_an_unknown_measure_with_exit_code_2(capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--only", "apply_throughput,warp_speed"]) == 2  # through python -m benchmarks
    assert "warp_speed" in capfd.readouterr().err


def test_bench_command_writes_json_and_plots(report: BenchReport, tmp_path: Path) -> None:
    from rich.console import Console

    from benchmarks.command import render_table, write_outputs

    console = Console(record=True, width=200)
    written = write_outputs(report, str(tmp_path), console)
    assert tmp_path / "bench-smallest.json" in written
    assert BenchReport.model_validate_json((tmp_path / "bench-smallest.json").read_text()) == report
    assert (tmp_path / "bench-smallest.md").read_text() == report.to_markdown()
    plots = sorted(p.name for p in written if p.suffix == ".png")
    assert plots == sorted(f"bench-smallest-{m.name}.png" for m in report.measures if m.figures)
    render_table(console, report)
    text = console.export_text()
    for f in report.figures():
        assert f.name in text and f"{f.ratio:.2f}" in text


def test_the_markdown_holds_the_header_and_one_row_per_figure(report: BenchReport) -> None:
    text = report.to_markdown()
    assert report.commit in text and report.started_at in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and " | " in line]
    for f in report.figures():
        assert sum(1 for line in rows if f"| {f.measure} | {f.name} |" in line) == 1


def test_bench_compare_prints_each_ratio_and_its_change(report: BenchReport, tmp_path: Path,
                                                         capfd: pytest.CaptureFixture[str]) -> None:
    first = report.figures()[0]
    doubled = first.model_copy(update={"values": [v * 2 for v in first.values]})
    measures = [m.model_copy(update={"figures": [doubled if f is first else f for f in m.figures]}) for m in report.measures]
    after = report.model_copy(update={"measures": measures, "commit": "after"})
    (tmp_path / "a.json").write_text(report.model_dump_json())
    (tmp_path / "b.json").write_text(after.model_dump_json())
    assert main(["bench", "--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capfd.readouterr().out
    assert first.name in out and "2.00x" in out and "1.00x" in out


def test_bench_compare_rejects_a_file_that_is_not_a_report(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.json").write_text("{}")
    assert main(["bench", "--compare", str(tmp_path / "a.json"), str(tmp_path / "a.json")]) == 2
    assert "not a report" in " ".join(capfd.readouterr().err.split())
