"""Actions from the runs page: approvals clicked in a real browser, and the guards around them."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from actors import Orchestrator, OrchestratorNotFound, Run, open_interrupts
from cluster.cli.ui import RunSource, UiServer
from coordinators import AgentState, TransitionBatch
from tests.actors.run_fixtures import counts, skill_registry, three
from tests.cluster.ui._pages import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


def text_of(driver: Any, css: str) -> str:
    found = driver.find_elements(By.CSS_SELECTOR, css)
    return found[0].text if found else ""


async def test_an_approval_clicked_in_the_page_resumes_the_run_and_a_second_click_changes_nothing(
        tmp_path: Path, browser: Any) -> None:
    store, log = str(tmp_path / "runs.sqlite"), str(tmp_path / "side-effects.log")
    orch = Orchestrator(AgentState(), caller=skill_registry(), name="ui-approval", store=store)
    run = Run(orch, three(log, approve="one"), first="planner", fallback="reviewer")
    try:
        assert (await run.run("go")).status == "waiting"
        (interrupt,) = await open_interrupts(orch)
        driver_task = asyncio.create_task(run.resume_when_answered(timeout=300))  # the run's driver, waiting
        with UiServer(RunSource(store=store), port=0, allow_actions=True).start() as server:
            card = f'.card[data-interrupt="{interrupt.id}"]'

            def open_page() -> None:
                browser.get(server.run_url(orch.name) + "#token=" + server.token)
                wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, card + " button.approve"), "approve button")
                assert text_of(browser, "#status") == "waiting"
                assert "a" in text_of(browser, card + " pre") and "b" in text_of(browser, card + " pre")
                browser.find_element(By.CSS_SELECTOR, card + " input.reason").send_keys("looks fine")
                browser.find_element(By.CSS_SELECTOR, card + " button.approve").click()
                wait_until(browser, lambda d: "approved" in text_of(d, card + " .outcome"), "approval acknowledged")

            await asyncio.to_thread(open_page)
            assert (await driver_task).status == "complete"
            assert counts(log) == {"coordinator:planner": 1, "skill:echo:a": 1, "skill:echo:b": 1,
                                   "coordinator:worker": 1, "coordinator:reviewer": 1}
            await asyncio.to_thread(wait_until, browser, lambda d: text_of(d, "#run-status") == "complete",
                                    "the page shows the resumed run complete")
            done_version = await orch.version()
            snapshot = (await orch.snapshot()).model_dump_json()

            def click_again() -> str:
                browser.find_element(By.CSS_SELECTOR, card + " button.approve").click()
                wait_until(browser, lambda d: "already approved" in text_of(d, "#error"), "the refusal shown")
                return text_of(browser, card + " .outcome")

            outcome = await asyncio.to_thread(click_again)
            assert "could not approve" in outcome and "already approved" in outcome
            assert await orch.version() == done_version
            assert (await orch.snapshot()).model_dump_json() == snapshot
            assert sum(counts(log).values()) == 5  # nothing ran again
    finally:
        await orch.close()


async def test_an_action_without_the_token_is_refused_in_the_page_and_changes_nothing(tmp_path: Path, browser: Any) -> None:
    store = str(tmp_path / "runs.sqlite")
    orch = Orchestrator(AgentState(), caller=skill_registry(), name="ui-no-token", store=store)
    try:
        assert (await Run(orch, three(approve="one"), first="planner").run("go")).status == "waiting"
        (interrupt,) = await open_interrupts(orch)
        before = await orch.version()
        with UiServer(RunSource(store=store), port=0, allow_actions=True).start() as server:
            card = f'.card[data-interrupt="{interrupt.id}"]'

            def click_without_token() -> None:
                browser.get(server.run_url(orch.name))
                browser.execute_script("sessionStorage.clear()")
                wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, card + " button.approve"), "approve button")
                browser.find_element(By.CSS_SELECTOR, card + " button.approve").click()
                wait_until(browser, lambda d: "token is missing" in text_of(d, "#error"), "the refusal shown")

            await asyncio.to_thread(click_without_token)
            assert await orch.version() == before
            assert [i.id for i in await open_interrupts(orch)] == [interrupt.id]
    finally:
        await orch.close()


def _post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def test_actions_need_the_token_the_server_origin_and_allow_actions(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.sqlite")
    orch = Orchestrator(AgentState(), name="ui-guarded", store=store)
    try:
        await orch.apply_batch(TransitionBatch().update_state("k", 1))
        body = {"name": orch.name, "new_name": "ui-guarded-fork", "at_version": 1}
        with UiServer(RunSource(store=store), port=0, allow_actions=True).start() as server:
            url = server.url + "api/fork"
            own = {"Origin": server.url.rstrip("/"), "Content-Type": "application/json"}
            refusals = [
                (own, 401, "token is missing"),
                ({**own, "X-Soloist-Token": "not-the-token"}, 401, "token is missing or wrong"),
                ({**own, "X-Soloist-Token": server.token, "Origin": "http://evil.example"}, 403, "Origin"),
                ({"Content-Type": "application/json", "X-Soloist-Token": server.token}, 403, "Origin None"),
                ({**own, "X-Soloist-Token": server.token, "Content-Type": "text/plain"}, 403, "JSON body"),
            ]
            for headers, status, message in refusals:
                got_status, got = await asyncio.to_thread(_post, url, body, headers)
                assert (got_status, got["ok"]) == (status, False) and message in got["error"], (headers, got)
            host_spoof = {**own, "X-Soloist-Token": server.token, "Host": "evil.example"}
            got_status, got = await asyncio.to_thread(_post, url, body, host_spoof)
            assert got_status == 403 and "not 'evil.example'" in got["error"]
            with pytest.raises(OrchestratorNotFound):
                Orchestrator.attach("ui-guarded-fork")
            assert await orch.version() == 1
            # the same request with the token from the server's own page goes through
            got_status, got = await asyncio.to_thread(_post, url, body, {**own, "X-Soloist-Token": server.token})
            assert got_status == 200 and got["run"] == "ui-guarded-fork", got
            forked = Orchestrator.attach("ui-guarded-fork", store=store)
            assert (await forked.snapshot()).conversation_state == {"k": 1}
            await forked.close()
        with UiServer(RunSource(store=store), port=0).start() as read_only:
            got_status, got = await asyncio.to_thread(
                _post, read_only.url + "api/fork", {**body, "new_name": "ui-guarded-fork-2"},
                {"Origin": read_only.url.rstrip("/"), "Content-Type": "application/json", "X-Soloist-Token": "x"})
            assert got_status == 403 and "read-only" in got["error"]
        assert await orch.version() == 1
    finally:
        await orch.close()


async def test_a_fork_from_the_page_copies_the_state_at_that_version_and_a_bad_one_shows_the_error(
        tmp_path: Path, browser: Any) -> None:
    store = str(tmp_path / "runs.sqlite")
    orch = Orchestrator(AgentState(), name="ui-fork-source", store=store)
    try:
        for step in range(1, 4):
            await orch.apply_batch(TransitionBatch().update_state("step", step))
        with UiServer(RunSource(store=store), port=0, allow_actions=True).start() as server:

            def fork(version: str, name: str, expect: str) -> str:
                browser.get(server.run_url(orch.name) + "#token=" + server.token)
                wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "main[data-ready]"), "run page ready")
                field = browser.find_element(By.ID, "fork-version")
                field.clear()
                field.send_keys(version)
                browser.find_element(By.ID, "fork-name").send_keys(name)
                browser.find_element(By.ID, "fork-button").click()
                wait_until(browser, lambda d: expect in text_of(d, "#fork-outcome") + text_of(d, "#error"), expect)
                return text_of(browser, "#fork-outcome") + text_of(browser, "#error")

            assert "into 'ui-fork-copy'" in await asyncio.to_thread(fork, "2", "ui-fork-copy", "forked")
            copy = Orchestrator.attach("ui-fork-copy", store=store)
            assert (await copy.snapshot()).conversation_state == {"step": 2}
            await copy.close()
            message = await asyncio.to_thread(fork, "99", "ui-fork-too-far", "could not fork")
            assert "99" in message
            with pytest.raises(OrchestratorNotFound):
                Orchestrator.attach("ui-fork-too-far")
            assert await orch.version() == 3
    finally:
        await orch.close()
