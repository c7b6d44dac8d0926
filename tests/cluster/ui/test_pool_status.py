"""``soloist status`` and the runs page show each subagent pool: its replicas, the calls waiting
and the queue wait, read from the replicas themselves while a batch is held inside them."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path

from typing import Any

import pytest
from pydantic import BaseModel
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from rich.console import Console

from actors import Call, Orchestrator, PoolPolicy, SkillRegistry, parallel_handoff, pool_status
from cluster.cli import StatusReport, render_status
from cluster.cli.ui import RunSource, UiServer
from cluster import live_replica_names
from coordinators import AgentState
from tests._waits import HANG_GUARD_S, eventually

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class GateIn(BaseModel):
    gate: str
    tag: int


class GateOut(BaseModel):
    tag: int


async def _held(inp: GateIn) -> GateOut:
    """Report entry with a file, then stay inside until the gate file exists."""
    gate = Path(inp.gate)
    (gate.parent / f"entered-{inp.tag}-{os.getpid()}").write_text("")
    deadline = time.monotonic() + HANG_GUARD_S
    while not gate.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return GateOut(tag=inp.tag)


async def test_status_and_the_runs_page_show_a_pools_replicas_running_and_waiting_calls(tmp_path: Path, browser: Any) -> None:
    skill = f"held_{uuid.uuid4().hex[:6]}"
    skills = SkillRegistry(policy=PoolPolicy(min_replicas=0, max_replicas=1, downscale_delay_s=0.5))
    skills.register(skill, _held)
    gate = tmp_path / "gate"
    run = Orchestrator(AgentState(), caller=skills)
    try:
        # Cap 4: four bodies run (one per lane), four wait behind them in their lanes.
        batch = asyncio.ensure_future(parallel_handoff(run, [Call(skill, GateIn(gate=str(gate), tag=i)) for i in range(8)],
                                                       GateOut))

        async def entered() -> int:
            return len(list(tmp_path.glob("entered-*")))

        await eventually(entered, lambda n: n == 4, "four bodies inside")

        async def ours() -> list:
            return [p for p in await pool_status() if p.skill == skill]

        pools = await eventually(ours, lambda found: len(found) == 1 and found[0].waiting == 4, "the pool listed")
        assert (pools[0].replicas, pools[0].running, pools[0].waiting) == (1, 4, 4)
        assert pools[0].pool == skills.pool_key

        console = Console(record=True, width=200)
        render_status(console, StatusReport(address="here", pools=pools))
        table = console.export_text()
        assert "subagent pools" in table and skill in table

        page_pools = [p for p in await RunSource().pools() if p.skill == skill]
        assert [(p.replicas, p.running) for p in page_pools] == [(1, 4)]
        with UiServer(RunSource(), port=0).start() as server:
            browser.get(server.url)
            row = f'#pools-table tr[data-skill="{skill}"]'
            await asyncio.to_thread(WebDriverWait(browser, HANG_GUARD_S, poll_frequency=0.1).until,
                                    lambda d: d.find_elements(By.CSS_SELECTOR, row), "the pool's row on the runs page")
            shown = browser.find_element(By.CSS_SELECTOR, row)
            assert shown.find_element(By.CSS_SELECTOR, ".replicas").text == "1"
            assert shown.find_element(By.CSS_SELECTOR, ".waiting").text == "4"

        gate.write_text("open")
        results = await batch
        assert sorted(r.output.tag for r in results) == list(range(8))
        # Queue wait: the four that waited behind a held body report it.
        pools = await eventually(ours, lambda found: found and found[0].waiting == 0, "the calls done")
        assert pools[0].queue_wait_p50_s >= 0.0
    finally:
        gate.write_text("open")
        await run.close()

    async def replicas_of_skill() -> int:
        return sum(1 for name in live_replica_names() if f":{skill}:" in name)

    await eventually(replicas_of_skill, lambda n: n == 0, "the pool's replica retired")
