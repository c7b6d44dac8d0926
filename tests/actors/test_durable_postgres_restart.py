"""A durable run on PostgreSQL whose server is killed and restarted mid-run (issue 30).

Writers apply continuously, each recording the request id and version of every write the
orchestrator acknowledged; ``pg_ctl stop -m immediate`` cuts every connection as a crash
does, then the server starts again. The writers wait (the run's store retries on new
connections) and go on; afterwards every acknowledged write is in the database exactly
once, under its request id and version, the run's versions are consecutive, and the state
holds each write once.
"""

from __future__ import annotations

import asyncio
from functools import partial

import pytest
from pydantic import BaseModel

from actors import Orchestrator
from cluster.storage.pg_server import PostgresServer
from tests._waits import HANG_GUARD_S

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]

WRITERS = 4
BEFORE, AFTER = 40, 40  # acknowledged writes to wait for before the kill and after the restart


class Log(BaseModel):
    written: list[str] = []


def _record(request_id: str, state: Log) -> None:
    state.written.append(request_id)


class _Writers:
    """Tasks applying to one run without pause, each recording what was acknowledged."""

    def __init__(self, orch: Orchestrator[Log], count: int) -> None:
        self.orch = orch
        self.acked: dict[str, int] = {}  # request id -> acknowledged version
        self.errors: list[BaseException] = []
        self._stop = asyncio.Event()
        self._progress = asyncio.Condition()
        self._tasks = [asyncio.create_task(self._write(f"w{i}")) for i in range(count)]

    async def _write(self, writer: str) -> None:
        i = 0
        while not self._stop.is_set():
            i += 1
            request_id = f"{writer}-{i}"
            try:
                version = await self.orch.apply(partial(_record, request_id), request_id=request_id)
            except Exception as exc:  # recorded and asserted on by the test
                self.errors.append(exc)
            else:
                self.acked[request_id] = version
            async with self._progress:
                self._progress.notify_all()
            if self.errors:
                return

    async def wait_for(self, total: int) -> None:
        """Until at least ``total`` writes were acknowledged (or a writer failed)."""
        async with self._progress:
            await asyncio.wait_for(self._progress.wait_for(lambda: len(self.acked) >= total or bool(self.errors)),
                                   HANG_GUARD_S)
        assert self.errors == []

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


async def test_a_database_killed_and_restarted_mid_run_pauses_the_writers_and_loses_nothing_acknowledged(
    own_server: PostgresServer,
) -> None:
    url = own_server.fresh_url()
    # No checkpoints, so the journal keeps every version for the count below.
    orch = Orchestrator(Log(), name="pg-restart", store=url, durability="sync", checkpoint_every=0)
    writers = _Writers(orch, WRITERS)
    try:
        await writers.wait_for(BEFORE)
        await asyncio.to_thread(own_server.stop, "immediate")  # as a crash: every connection cut
        down = len(writers.acked)  # at most the writes in flight at the kill are acknowledged after it
        await asyncio.to_thread(own_server.start)
        await writers.wait_for(down + WRITERS + AFTER)  # they went on, through new connections
    finally:
        await writers.stop()
    assert writers.errors == []
    final = await orch.version()
    state = await orch.snapshot()
    await orch.close()

    acked = writers.acked
    assert final == len(acked)  # every write acknowledged once, none lost, none failed
    assert sorted(acked.values()) == list(range(1, final + 1))
    assert sorted(state.written) == sorted(acked) and len(set(state.written)) == len(state.written)
    with own_server.connect(url) as conn:
        journal = conn.execute("SELECT version, request_id FROM journal WHERE run = %s ORDER BY version",
                               ("pg-restart",)).fetchall()
        requests = dict(conn.execute("SELECT request_id, version FROM requests WHERE run = %s", ("pg-restart",)).fetchall())
    assert [v for v, _ in journal] == list(range(1, final + 1))  # consecutive, nothing twice
    assert dict((rid, v) for v, rid in journal) == acked  # each acknowledged write, under its version
    assert requests == acked
    # Writes after the restart went through: versions past those acknowledged before the kill.
    assert final >= down + WRITERS + AFTER
