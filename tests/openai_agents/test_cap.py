"""Model requests go out under the cluster-wide cap: conversations that share a semaphore
scope (one model endpoint) never have more than four requests at the server at once.

Eight durable conversations start together; the model subagents could send eight requests
at once (``replicas=8``, each conversation its own run), so only the scope's cap holds them to
four. The server holds every request until the test releases them, once four are in flight
(saturated); it counts the requests in flight and their peak at its socket.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actors.openai_agents import SoloistRunner
from tests._waits import eventually
from tests.openai_agents._agents import QUIET, factory, scribe, script
from tests.openai_agents._server import CountingServer

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

CONVERSATIONS = 8


async def test_conversations_sharing_a_scope_hold_four_requests_in_flight_at_the_server_at_most(tmp_path: Path) -> None:
    with CountingServer(script) as server:
        server.hold(lambda label, step: label.startswith("short"))
        runner = SoloistRunner(model_factory=factory(server.base_url), semaphore_scope="one-endpoint",
                               replicas=CONVERSATIONS)
        runs = [asyncio.ensure_future(runner.run(scribe(), f"short-{i}", context=str(tmp_path / "ledger.log"),
                                                 run_config=QUIET))
                for i in range(CONVERSATIONS)]
        try:
            saturated = await eventually(lambda: asyncio.to_thread(lambda: server.in_flight), lambda n: n >= 4,
                                         "four requests in flight at the server (the cap saturated)")
        finally:
            server.release()
        results = await asyncio.gather(*runs)
        assert sorted(r.final_output for r in results) == sorted(f"short-{i} done" for i in range(CONVERSATIONS))
        assert sum(server.counts.values()) == 2 * CONVERSATIONS
        assert saturated == 4, f"{saturated} requests were at the server when the cap was saturated"
        assert server.peak == 4, f"the server saw {server.peak} requests at once"
        print(f"peak in flight at the server: {server.peak}; at saturation: {saturated}")
