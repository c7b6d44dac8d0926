"""The runs page in a real headless Chromium: runs list, live run page, escaping."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from actors import Orchestrator
from cluster.cli.ui import RunSource, UiServer
from coordinators import AgentState, TransitionBatch
from tests.cluster.ui._pages import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


def text_of(driver: Any, css: str) -> str:
    found = driver.find_elements(By.CSS_SELECTOR, css)
    return found[0].text if found else ""


async def test_runs_list_shows_a_live_run_and_a_stored_run(tmp_path: Path, browser: Any) -> None:
    store = str(tmp_path / "runs.sqlite")
    stored = Orchestrator(AgentState(), name="ui-stored-run", store=store)
    await stored.apply_batch(TransitionBatch().update_stage("complete"))
    await stored.close()
    live = Orchestrator(AgentState(), name="ui-live-run", store=store)
    await live.apply_batch(TransitionBatch().update_stage("exploring"))
    await live.apply_batch(TransitionBatch().update_state("k", 1))
    try:
        with UiServer(RunSource(store=store), port=0).start() as server:
            browser.get(server.url)
            wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-run="ui-stored-run"]')
                       and d.find_elements(By.CSS_SELECTOR, 'tr[data-run="ui-live-run"]'), "both runs listed")
            live_row = browser.find_element(By.CSS_SELECTOR, 'tr[data-run="ui-live-run"]')
            stored_row = browser.find_element(By.CSS_SELECTOR, 'tr[data-run="ui-stored-run"]')
            assert live_row.get_attribute("data-status") == "live"
            assert live_row.find_element(By.CSS_SELECTOR, ".version").text == "2"
            assert "exploring" in live_row.text and "0 / 4" in live_row.text
            assert stored_row.get_attribute("data-status") == "stored"
            assert stored_row.find_element(By.CSS_SELECTOR, ".version").text == "1"
            assert "complete" in stored_row.text
            # each name links to its run page
            stored_row.find_element(By.TAG_NAME, "a").click()
            wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "main[data-ready]"), "stored run page")
            assert text_of(browser, "#run-name") == "ui-stored-run"
            assert text_of(browser, "#status") == "stored"
    finally:
        await live.close()


async def test_run_page_updates_its_version_while_applies_happen_without_reload(browser: Any) -> None:
    orch = Orchestrator(AgentState(), name="ui-live-updates")
    try:
        await orch.apply_batch(TransitionBatch().update_state("step", 0))
        with UiServer(RunSource(), port=0).start() as server:
            browser.get(server.run_url(orch.name))
            wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "main[data-ready]"), "run page ready")
            wait_until(browser, lambda d: text_of(d, "#live-note") == "live", "following the run")
            assert text_of(browser, "#version") == "1"
            _open_state(browser)
            browser.execute_script("window.__sameDocument = 'yes'")  # gone if the page reloads
            for step in range(1, 6):
                await orch.apply_batch(TransitionBatch().update_state("step", step))
                await asyncio.to_thread(wait_until, browser, lambda d, v=str(step + 1): text_of(d, "#version") == v,
                                        f"version {step + 1} shown")
            wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#timeline li[data-version="6"]'),
                       "timeline entry of version 6")
            assert browser.execute_script("return window.__sameDocument") == "yes"
            newest = browser.find_element(By.CSS_SELECTOR, "#timeline li").text
            assert newest.startswith("v6") and '"value":5' in newest
            # the state panel follows too
            wait_until(browser, lambda d: _state_value(d, "step") == '"step": 5', "state shows step 5")
    finally:
        await orch.close()


def _open_state(driver: Any) -> None:
    """Open every branch of the state tree (as a reader would, click by click)."""
    wait_until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#state[data-version]"), "state shown")
    driver.execute_script(
        "for (let i = 0; i < 5; i++) document.querySelectorAll('#state details').forEach(d => { if (!d.open) d.open = true; });")
    wait_until(driver, lambda d: d.execute_script("return [...document.querySelectorAll('#state details')].every(d => d.open)"),
               "state tree open")


def _state_value(driver: Any, key: str) -> str:
    return driver.execute_script(
        "const rows=[...document.querySelectorAll('#state .row')];"
        "const r=rows.find(r=>r.querySelector('.k')&&r.querySelector('.k').textContent===JSON.stringify(arguments[0]));"
        "return r?r.textContent:'';", key)


async def test_a_script_in_the_state_is_rendered_as_text(browser: Any) -> None:
    payload = "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">"
    orch = Orchestrator(AgentState(), name="ui-escaping <b>bold</b>")
    try:
        await orch.apply_batch(TransitionBatch().update_state("note", payload).update_stage("<i>stage</i>"))
        with UiServer(RunSource(), port=0).start() as server:
            browser.get(server.run_url(orch.name))
            wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "main[data-ready]"), "run page ready")
            _open_state(browser)
            wait_until(browser, lambda d: "<script>" in text_of(d, "#state"), "the payload shown in the state")
            assert _state_value(browser, "note") == '"note": ' + json.dumps(payload)
            assert "<script>window.__pwned" in text_of(browser, "#timeline")
            assert text_of(browser, "#run-name") == "ui-escaping <b>bold</b>"
            assert text_of(browser, "#stage") == "<i>stage</i>"
            assert browser.execute_script("return window.__pwned") is None
            scripts = browser.execute_script("return [...document.scripts].map(s => s.src)")
            assert scripts == [server.url + "static/app.js"]
            assert not browser.find_elements(By.CSS_SELECTOR, "main img")
            made_from_data = browser.execute_script(
                "return [...document.querySelectorAll('main *')].filter(e => ['bold', 'stage'].includes(e.textContent)).length")
            assert made_from_data == 0  # no <b>bold</b> or <i>stage</i> element was created from the data
    finally:
        await orch.close()
