"""Model requests go out under the cluster-wide cap: conversations that share a semaphore
scope (one model endpoint) never have more than four requests at the model at once.

Eight durable conversations start together; the model subagents may run eight requests at
once (``replicas=8``), so only the scope's cap can hold them to four. Each request writes
``start`` and ``end`` lines from inside its replica and waits for a release file between
them: the test releases them once four are in flight (saturation), and the peak is counted
over the whole ledger afterwards.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actors.pydantic_ai import SoloistAgent
from tests._waits import eventually
from tests.pydantic_ai._agents import build_agent, held_talk, ledger_lines, most_in_flight

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

CONVERSATIONS = 8


async def test_conversations_sharing_a_scope_hold_four_model_requests_in_flight_at_most(tmp_path: Path) -> None:
    ledger, release = tmp_path / "ledger.log", tmp_path / "release"
    durable = SoloistAgent(build_agent(ledger, release=release, script=held_talk, name="capped"),
                           semaphore_scope="one-endpoint", replicas=CONVERSATIONS)
    runs = [asyncio.ensure_future(durable.run(f"conv-{i}", deps=str(ledger))) for i in range(CONVERSATIONS)]
    try:
        await eventually(lambda: asyncio.to_thread(ledger_lines, ledger), lambda lines: most_in_flight(lines) >= 4,
                         "four model requests in flight (the cap saturated)")
    finally:
        release.touch()
    results = await asyncio.gather(*runs)
    assert sorted(r.output for r in results) == sorted(f"conv-{i} done" for i in range(CONVERSATIONS))
    lines = ledger_lines(ledger)
    assert len([line for line in lines if line.startswith("start ")]) == 2 * CONVERSATIONS
    assert most_in_flight(lines) == 4, f"the model saw {most_in_flight(lines)} requests at once"
