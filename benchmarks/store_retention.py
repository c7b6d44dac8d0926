"""Store size after many writes, with and without a retention window.

Drives a real durable orchestrator (``durability="batch"``, 64 concurrent writers) through
``WRITES`` ``apply_batch`` writes, each changing one state key and appending one message
(so the state itself grows a little, as a real run's does), once with
``keep_versions=None, keep_days=None`` (keep everything) and once with ``keep_versions=1000``,
both with a checkpoint every 1,000 versions. Prints the SQLite file size (main file + WAL)
and the journal rows and checkpoints left.

    python benchmarks/store_retention.py [WRITES]
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time

from actors import Orchestrator
from cluster import connect
from cluster.storage import SqliteStore
from coordinators import AgentState, TransitionBatch

WRITERS = 64


def _size(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


async def fill(path: str, writes: int, keep_versions: int | None) -> tuple[float, int]:
    orch = Orchestrator(AgentState(), store=path, durability="batch", checkpoint_every=1_000,
                        keep_versions=keep_versions, keep_days=None)
    started = time.perf_counter()
    try:
        counter = iter(range(writes))

        async def writer() -> None:
            for i in counter:
                batch = TransitionBatch().update_state("last", i)
                if i % 100 == 0:  # the state grows slowly too
                    batch.add_message({"role": "assistant", "content": f"step {i}"})
                await orch.apply_batch(batch)

        await asyncio.gather(*(writer() for _ in range(WRITERS)))
        version = await orch.version()
    finally:
        await orch.close()
    return time.perf_counter() - started, version


def main(writes: int) -> None:
    connect()
    with tempfile.TemporaryDirectory() as tmp:
        for label, keep in (("no retention (keep everything)", None), ("keep_versions=1000", 1_000)):
            path = os.path.join(tmp, f"{keep}.sqlite")
            seconds, version = asyncio.run(fill(path, writes, keep))
            store = SqliteStore(path)
            stats = store.statistics()
            store.close()
            print(f"{label:32s} {version:>7,d} writes in {seconds:6.1f} s: file {_size(path) / 1e6:7.2f} MB, "
                  f"{stats.journal_rows:>7,d} journal rows, {stats.checkpoints} checkpoints")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
