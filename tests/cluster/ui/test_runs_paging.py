"""The runs list at tens of thousands of runs: ``/api/runs`` answers one page (offset, limit,
status) with the total and the count of every status, reading only the page's runs; live
hosted runs carry their host, and the run hosts are listed as ``host_statistics()`` reports
them; the page in Chromium pages and filters."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from actors import Orchestrator, host_statistics, hosted_runs, run_host_name
from cluster.cli import collect_status, render_status
from cluster.cli.ui import RunSource, UiServer
from coordinators import AgentState
from tests._many_runs import BIG, big_store, copy_of, expected_counts, make_store, name_of, status_of
from tests._waits import HANG_GUARD_S, eventually
from tests.cluster.ui._pages import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

COUNT = BIG


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=HANG_GUARD_S) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _runs(server: UiServer, **params: Any) -> tuple[int, Any]:
    return _get(server.url + "api/runs?" + urllib.parse.urlencode(params))


def rows_shown(driver: Any, table: str = "runs-body") -> list[dict[str, str]]:
    """The rows of a table as the page shows them now, read in one step (the page redraws
    its tables every two seconds, so elements found one by one may be gone a moment later)."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#' + arguments[0] + ' tr')].map(tr => ({...tr.dataset, "
        "cells: Object.fromEntries([...tr.cells].map((td, i) => [td.className.split(' ').pop() || String(i), td.textContent]))}))",
        table)


def listed(driver: Any) -> list[str]:
    return [row["run"] for row in rows_shown(driver)]


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return big_store(tmp_path_factory.mktemp("many"))


@pytest.fixture
def damaged(many: Path, tmp_path: Path) -> Path:
    """A copy of the big store in which run 5 (on the last page) cannot be read in full."""
    return copy_of(many, tmp_path, broken=5)


async def test_the_api_answers_page_three_with_the_total_and_reads_only_the_runs_on_it(damaged: Path) -> None:
    with UiServer(RunSource(store=str(damaged), live=False), port=0).start() as server:
        status, page = await asyncio.to_thread(_runs, server, offset=100, limit=50)
        assert status == 200, page
        assert (page["total"], page["offset"], page["limit"], page["status"]) == (COUNT, 100, 50, None)
        assert [r["name"] for r in page["runs"]] == [name_of(i) for i in range(19_899, 19_849, -1)]
        assert all(r["error"] is None and r["status"] == "stored" for r in page["runs"])  # run 5 was never read
        assert [r["run_status"] for r in page["runs"]] == [None if status_of(i) == "none" else status_of(i)
                                                            for i in range(19_899, 19_849, -1)]
        assert next(r for r in page["runs"] if r["name"] == name_of(19_870))["version"] == 3
        assert page["counts"] == expected_counts(COUNT) and page["hosts"] == []
        # the page that holds run 5 reads it, and says why it cannot be shown
        status, last = await asyncio.to_thread(_runs, server, offset=COUNT - 10, limit=10)
        errors = {r["name"]: r["error"] for r in last["runs"] if r["error"]}
        assert list(errors) == [name_of(5)] and "StoreCorrupted" in errors[name_of(5)]


async def test_the_api_filters_by_status_and_counts_every_status(many: Path) -> None:
    counts = expected_counts(COUNT)
    with UiServer(RunSource(store=str(many), live=False), port=0).start() as server:
        for wanted in ("waiting", "max_turns", "none"):
            status, page = await asyncio.to_thread(_runs, server, offset=20, limit=30, status=wanted)
            assert status == 200, page
            mine = [name_of(i) for i in range(COUNT - 1, -1, -1) if status_of(i) == wanted]
            assert page["total"] == counts[wanted] and page["counts"] == counts
            assert [r["name"] for r in page["runs"]] == mine[20:50]


async def test_a_bad_page_is_refused_with_what_is_allowed(many: Path) -> None:
    with UiServer(RunSource(store=str(many), live=False), port=0).start() as server:
        refusals = [
            ({"limit": 0}, "limit must be a whole number >= 1, got 0"),
            ({"offset": -1}, "offset must be a whole number >= 0, got -1"),
            ({"limit": 501}, "limit is at most 500, got 501"),
            ({"offset": "x"}, "offset= must be a whole number, got 'x'"),
            ({"status": "done"}, "status must be one of running, waiting, complete, stopped, max_turns, cancelled, none, got 'done'"),
        ]
        for params, message in refusals:
            status, body = await asyncio.to_thread(_runs, server, **params)
            assert (status, body["ok"]) == (400, False) and message in body["error"], (params, body)


def _start_hosted(store: str, runs: list[Orchestrator[Any]]) -> set[str]:
    """200 named runs on the run hosts, in one store; returns the names of the 50 that unload
    (idle for 0.05 s); the others stay loaded (an hour before they would unload)."""
    prefix = f"paged-{uuid.uuid4().hex[:6]}"
    unloading = set()
    for i in range(200):
        short = i % 4 == 0
        runs.append(Orchestrator(AgentState(), name=f"{prefix}-{i:03d}", store=store, unload_after_s=0.05 if short else 3_600.0))
        if short:
            unloading.add(runs[-1].name)
    return unloading


async def test_hosted_runs_are_paged_with_their_hosts_and_the_hosts_table_matches_host_statistics(
        tmp_path: Path, browser: Any) -> None:
    store = str(tmp_path / "hosted.sqlite")
    runs: list[Orchestrator[Any]] = []
    try:
        await _hosted_runs_paged(store, runs, _start_hosted(store, runs), browser)
    finally:
        for run in runs:
            await run.close()


async def _hosted_runs_paged(store: str, runs: list[Orchestrator[Any]], unloading: set[str], browser: Any) -> None:
    statuses = {run.name: ("running", "complete", "waiting")[i % 3] for i, run in enumerate(runs)}
    for run in runs:
        await run.mark_run(statuses[run.name])  # type: ignore[arg-type]
    names = set(statuses)

    async def unloaded() -> set[str]:
        records = await asyncio.to_thread(hosted_runs)
        return {record.name for _, record in records if record.name in names and not record.loaded}

    await eventually(unloaded, lambda found: found == unloading, "the short-lived runs unloaded")

    async def pages(status: str | None = None) -> list[Any]:
        rows, offset = [], 0
        while True:
            report = await asyncio.to_thread(collect_status, store=store, address="auto", offset=offset, limit=50,
                                             status=status)
            rows += report.runs
            offset += 50
            if offset >= report.total:
                return rows

    rows = [r for r in await pages() if r.name in names]
    assert sorted(r.name for r in rows) == sorted(names)  # each once, across the pages
    for row in rows:
        assert (row.source, row.stored, row.host, row.status) == ("live", True, run_host_name(row.name), statuses[row.name])
        assert row.loaded is (row.name not in unloading) and row.error is None and row.version == 0
    running = [r.name for r in await pages("running") if r.name in names]
    assert sorted(running) == sorted(n for n, s in statuses.items() if s == "running")

    # Reading the pages loaded none of the unloaded runs again, so the hosts table of one
    # status matches what the hosts report around it (other runs of the session may still move).
    async def both() -> tuple[Any, Any, Any]:
        before = await asyncio.to_thread(host_statistics)
        report = await asyncio.to_thread(collect_status, store=store, address="auto", limit=1)
        return before, report, await asyncio.to_thread(host_statistics)

    before, report, after = await eventually(both, lambda found: found[0] == found[1].hosts == found[2], "a still moment")
    assert {h.name for h in report.hosts} >= {run_host_name(n) for n in names}
    assert await unloaded() == unloading
    console = Console(record=True, width=200)
    render_status(console, report)
    text = console.export_text()
    assert "run hosts" in text
    for host in report.hosts:
        cells = [[c.strip() for c in line.split("│")[1:7]] for line in text.splitlines() if "│" in line]
        assert any(c[0].startswith(host.name) and c[1:] == [str(host.pid), str(host.loaded), str(host.unloaded),
                                                             str(host.activations), str(host.unloads)] for c in cells), text

    # The runs page: each live row says its host; the hosts table shows what the hosts report.
    with UiServer(RunSource(store=store), port=0).start() as server:
        status, page = await asyncio.to_thread(_runs, server, limit=500)
        assert status == 200, page
        mine = {r["name"]: r for r in page["runs"] if r["name"] in names}
        assert set(mine) == names
        assert all(r["host"] == run_host_name(n) and r["loaded"] is (n not in unloading) and r["live"]
                   for n, r in mine.items())
        browser.get(server.url + "?" + urllib.parse.urlencode({"status": "complete"}))
        some = sorted(n for n, s in statuses.items() if s == "complete")[0]
        await asyncio.to_thread(wait_until, browser, lambda d: some in listed(d), "a hosted run listed")
        (shown,) = [row for row in rows_shown(browser) if row["run"] == some]
        assert shown["host"] == run_host_name(some) and f"live on {run_host_name(some)}" in shown["cells"]["where"]
        assert shown["runStatus"] == "complete"

        def hosts_shown(d: Any) -> bool:
            shown = {row["host"]: [row["cells"][k] for k in ("loaded", "unloaded", "activations", "unloads")]
                     for row in rows_shown(d, "hosts-body")}
            return shown == {h.name: [str(h.loaded), str(h.unloaded), str(h.activations), str(h.unloads)]
                             for h in host_statistics()}

        await asyncio.to_thread(wait_until, browser, hosts_shown, "the hosts table as host_statistics() reports it")


async def test_the_page_shows_paging_controls_moves_to_the_next_page_and_filters_by_status(tmp_path: Path, browser: Any) -> None:
    path = tmp_path / "runs.sqlite"
    make_store(path, 130)
    with UiServer(RunSource(store=str(path), live=False), port=0).start() as server:
        browser.get(server.url)

        wait_until(browser, lambda d: listed(d) == [name_of(i) for i in range(129, 79, -1)], "the first page")
        assert browser.find_element(By.ID, "page-info").text == "showing 1–50 of 130 runs"
        assert browser.find_element(By.ID, "prev-page").get_attribute("disabled") is not None
        browser.find_element(By.ID, "next-page").click()
        wait_until(browser, lambda d: listed(d) == [name_of(i) for i in range(79, 29, -1)], "the second page")
        assert browser.find_element(By.ID, "page-info").text == "showing 51–100 of 130 runs"
        assert "offset=50" in browser.current_url
        browser.find_element(By.ID, "next-page").click()
        wait_until(browser, lambda d: listed(d) == [name_of(i) for i in range(29, -1, -1)], "the last page")
        assert browser.find_element(By.ID, "next-page").get_attribute("disabled") is not None
        browser.find_element(By.ID, "prev-page").click()
        wait_until(browser, lambda d: listed(d)[:1] == [name_of(79)], "back to the second page")

        counts = expected_counts(130)
        options = {o.get_attribute("value"): o.text for o in browser.find_elements(By.CSS_SELECTOR, "#status-filter option")}
        assert options[""] == "all (130)" and options["running"] == f"running ({counts['running']})"
        Select(browser.find_element(By.ID, "status-filter")).select_by_value("running")
        running = [name_of(i) for i in range(129, -1, -1) if status_of(i) == "running"]
        wait_until(browser, lambda d: listed(d) == running, "the running runs, from the first")
        assert browser.find_element(By.ID, "page-info").text == f"showing 1–{len(running)} of {len(running)} runs"
        assert {row["runStatus"] for row in rows_shown(browser)} == {"running"}
        assert browser.find_element(By.ID, "next-page").get_attribute("disabled") is not None
