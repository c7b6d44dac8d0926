"""``soloist status`` over a store of 20,000 runs: a page at a time, filtered by status, with
the count of every run by status; only the runs of the page are read in full."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from cluster.cli import collect_status, main, render_status
from tests._many_runs import BIG, big_store, break_run, copy_of, expected_counts, name_of, status_of

COUNT = BIG


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return big_store(tmp_path_factory.mktemp("many"))


@pytest.fixture
def copy(many: Path, tmp_path: Path) -> Path:
    """A copy of the big store that a test may damage."""
    return copy_of(many, tmp_path)


def test_page_three_lists_the_right_runs_newest_first_with_the_total(many: Path) -> None:
    report = collect_status(store=str(many), address=None, offset=100, limit=50)
    assert report.total == COUNT and (report.offset, report.limit, report.status) == (100, 50, None)
    assert [r.name for r in report.runs] == [name_of(i) for i in range(19_899, 19_849, -1)]
    assert [r.status for r in report.runs] == [status_of(i) for i in range(19_899, 19_849, -1)]
    assert all(r.source == "store" and r.stored and r.host is None for r in report.runs)
    busy = next(r for r in report.runs if r.name == name_of(19_870))
    assert busy.version == 3 and [a["agent_id"] for a in busy.agents] == ["coordinator:a"]
    assert {r.version for r in report.runs if r is not busy} == {0}
    assert report.counts == expected_counts(COUNT) and sum(report.counts.values()) == COUNT


def test_a_status_filter_pages_through_the_runs_of_that_status_and_counts_every_status(many: Path) -> None:
    counts = expected_counts(COUNT)
    for status in ("running", "waiting", "complete", "cancelled", "none"):
        report = collect_status(store=str(many), address=None, limit=40, offset=80, status=status)
        assert report.total == counts[status], status
        assert report.counts == counts  # the counts are of every run, whatever the filter
        assert len(report.runs) == 40 and {r.status for r in report.runs} == {status}
        mine = [name_of(i) for i in range(COUNT - 1, -1, -1) if status_of(i) == status]
        assert [r.name for r in report.runs] == mine[80:120]
    # the first runs got their status through update_run_metadata
    last = collect_status(store=str(many), address=None, offset=counts["waiting"] - 1, limit=10, status="waiting")
    assert [r.name for r in last.runs] == [name_of(5)]


def test_runs_off_the_page_are_not_read_so_a_damaged_one_does_not_stop_the_page(copy: Path) -> None:
    # Run 5 (the last page, newest first) can no longer be read in full: its journal and its
    # agent records are not JSON. Page 3 never reads it; the page that holds it says why.
    break_run(copy, 5)
    page = collect_status(store=str(copy), address=None, offset=100, limit=50)
    assert len(page.runs) == 50 and all(r.error is None for r in page.runs)
    last = collect_status(store=str(copy), address=None, offset=COUNT - 10, limit=10)
    errors = {r.name: r.error for r in last.runs if r.error is not None}
    assert list(errors) == [name_of(5)] and "StoreCorrupted" in errors[name_of(5)]
    assert [r.name for r in last.runs] == [name_of(i) for i in range(9, -1, -1)]


def test_the_table_ends_with_where_the_page_is_and_the_counts(many: Path) -> None:
    console = Console(record=True, width=200)
    render_status(console, collect_status(store=str(many), address=None, offset=100, limit=50))
    text = console.export_text()
    assert "showing 101–150 of 20000 runs (use --offset/--limit)" in text
    assert "by status: running 4000, waiting 2000, complete 6000, stopped 2000, max_turns 2000, cancelled 2000, none 2000" in text
    console = Console(record=True, width=200)
    render_status(console, collect_status(store=str(many), address=None, offset=COUNT, status="none"))
    assert "no runs with status none from offset 20000: there are 2000" in console.export_text()


def test_the_command_pages_and_filters_in_json_too(many: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["status", "--store", str(many), "--json", "--limit", "5", "--offset", "10", "--status", "stopped"])
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["total"], document["offset"], document["limit"], document["status"]) == (2_000, 10, 5, "stopped")
    stopped = [name_of(i) for i in range(COUNT - 1, -1, -1) if status_of(i) == "stopped"]
    assert [r["name"] for r in document["runs"]] == stopped[10:15]
    assert document["counts"] == expected_counts(COUNT)
    assert main(["status", "--store", str(many)]) == 0
    assert "showing 1–50 of 20000 runs" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (("--limit", "0"), "argument --limit: expected a number >= 1, got 0"),
    (("--offset", "-1"), "argument --offset: expected a number >= 0, got -1"),
    (("--limit", "many"), "argument --limit: expected a whole number, got 'many'"),
    (("--status", "done"), "argument --status: invalid choice: 'done' (choose from 'running', 'waiting', 'complete', "
                           "'stopped', 'max_turns', 'cancelled', 'none')"),
])
def test_a_bad_page_or_status_exits_two_saying_what_is_allowed(many: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...],
                                                                message: str) -> None:
    assert main(["status", "--store", str(many), *args]) == 2
    assert message in capsys.readouterr().err


def test_the_library_call_refuses_a_bad_page_naming_every_problem(many: Path) -> None:
    with pytest.raises(ValueError) as caught:
        collect_status(store=str(many), address=None, offset=-3, limit=0, status="finished")
    assert str(caught.value) == ("offset must be a whole number >= 0, got -3; limit must be a whole number >= 1, got 0; "
                                 "status must be one of running, waiting, complete, stopped, max_turns, cancelled, none, "
                                 "got 'finished'")
