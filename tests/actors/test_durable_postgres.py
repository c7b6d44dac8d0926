"""Durable orchestrators on a PostgreSQL store: a URL is a store like a path (the hosts share
one store object per URL), exactly-once request ids across close, attach and a crash, history
and fork, and the URL's password never reported."""

from __future__ import annotations

import os
import signal

import pytest
from pydantic import BaseModel

from actors import Orchestrator
from cluster.storage import PostgresStore, redact
from tests._postgres import USER_WITH_PASSWORD, PostgresServer

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class Counter(BaseModel):
    count: int = 0
    log: list[str] = []


def inc(state: Counter) -> None:
    state.count += 1


@pytest.fixture
def url(postgres_server: PostgresServer) -> str:
    """A fresh schema, reached as a role that logs in with a password."""
    user, password = USER_WITH_PASSWORD
    return postgres_server.fresh_url().replace("postgresql://postgres@", f"postgresql://{user}:{password}@")


async def test_a_run_on_postgres_is_closed_attached_again_and_applies_each_request_once(url: str) -> None:
    orch = Orchestrator(Counter(), name="pg-ids", store=url, checkpoint_every=3)
    recorded = {f"r{i}": await orch.apply(inc, request_id=f"r{i}") for i in range(7)}
    stats = await orch.statistics()
    assert stats.store == redact(url) and USER_WITH_PASSWORD[1] not in stats.model_dump_json()
    await orch.close()
    again = Orchestrator.attach("pg-ids", store=url)
    try:
        assert [await again.apply(inc, request_id=rid) for rid in recorded] == list(recorded.values())
        assert (await again.snapshot()).count == 7 and await again.version() == 7
    finally:
        await again.close()
    store = PostgresStore(url)
    try:
        checkpoint, tail = store.load("pg-ids")
        assert checkpoint.version + len(tail) == 7 and store.find_request("pg-ids", "r0") == 1
    finally:
        store.close()


async def test_a_run_on_postgres_recovers_from_a_killed_worker_without_applying_twice(url: str) -> None:
    orch = Orchestrator(Counter(), name="pg-crash", store=url, dedicated=True, checkpoint_every=0)
    try:
        v = await orch.apply(inc, request_id="before-crash")
        os.kill((await orch.statistics()).pid, signal.SIGKILL)
        assert await orch.apply(inc, request_id="before-crash") == v  # waits out the restart
        stats = await orch.statistics()
        assert stats.restarted and stats.duplicate_requests == 1
        assert (await orch.snapshot()).count == 1
    finally:
        await orch.close()


async def test_history_and_fork_read_and_write_a_postgres_store(url: str) -> None:
    orch = Orchestrator(Counter(), name="pg-history", store=url)
    try:
        for word in "abc":
            await orch.apply(lambda s, w=word: s.log.append(w))
        assert [c.version for c in await orch.history(0)] == [1, 2, 3]
        fork = await orch.fork("pg-fork", at_version=2, store=url)
        try:
            assert (await fork.snapshot()).log == ["a", "b"]
        finally:
            await fork.close()
    finally:
        await orch.close()
