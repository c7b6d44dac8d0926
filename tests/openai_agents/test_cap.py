"""Model requests go out under the cluster-wide cap: conversations that share a semaphore
scope (one model endpoint) never have more than four requests at the server at once.

Eight durable conversations start together; the model subagents could send eight requests
at once (``replicas=8``, each conversation its own run), so only the scope's cap holds them to
four. The server holds every request until the test releases them, once four are in flight
(saturated: four at the server and the other conversations' requests waiting for a permit of
the scope); it counts the requests in flight and their peak at its socket.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actors.openai_agents import SoloistRunner
from cluster import ClusterSemaphore
from tests._waits import eventually
from tests.openai_agents._agents import QUIET, factory, scribe, script
from tests.openai_agents._server import CountingServer

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

CONVERSATIONS = 8
SCOPE = "one-endpoint"


async def test_conversations_sharing_a_scope_hold_four_requests_in_flight_at_the_server_at_most(tmp_path: Path) -> None:
    with CountingServer(script) as server:
        server.hold(lambda label, step: label.startswith("short"))
        runner = SoloistRunner(model_factory=factory(server.base_url), semaphore_scope=SCOPE,
                               replicas=CONVERSATIONS)
        runs = [asyncio.ensure_future(runner.run(scribe(), f"short-{i}", context=str(tmp_path / "ledger.log"),
                                                 run_config=QUIET))
                for i in range(CONVERSATIONS)]
        try:
            saturated = await eventually(lambda: asyncio.to_thread(lambda: server.in_flight), lambda n: n >= 4,
                                         "four requests in flight at the server (the cap saturated)")
            semaphore = await ClusterSemaphore.existing_async(SCOPE)
            queued = await eventually(semaphore.statistics, lambda s: s.waiting + s.held >= CONVERSATIONS,
                                      "every other conversation's request to wait for a permit of the scope")
            at_release = server.in_flight
        finally:
            server.release()
        results = await asyncio.gather(*runs)
        assert sorted(r.final_output for r in results) == sorted(f"short-{i} done" for i in range(CONVERSATIONS))
        assert sum(server.counts.values()) == 2 * CONVERSATIONS
        assert saturated == at_release == 4, f"{saturated}, then {at_release} requests at the server while saturated"
        print(f"semaphore while saturated: held {queued.held}, waiting {queued.waiting}")
        assert server.peak == 4, f"the server saw {server.peak} requests at once"
        print(f"peak in flight at the server: {server.peak}; at saturation: {saturated}")
