"""A driver of the node-loss failover test (tests/reliability/test_failover_postgres.py).

Joins the test's cluster, writes its node id to ``LEDGER.node``, attaches to the run NAME
stored at the database URL and applies increments with the request ids ``<TAG>-0``, ``<TAG>-1``,
... until the file STOP exists (so it is surely still writing when the test takes the node
away, however fast the writes are). Each acknowledged write is appended to LEDGER as
``<version> <request id>`` and fsynced before the next write starts: the ledger holds exactly
what was promised to this driver.
Usage: ``python _failover_driver.py ADDRESS URL NAME TAG STOP LEDGER``.
"""

from __future__ import annotations

import asyncio
import os
import sys


def bump(state: object) -> None:
    state.n += 1  # type: ignore[attr-defined]  # the test's Tally


def _append_synced(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as ledger:
        ledger.write(line)
        ledger.flush()
        os.fsync(ledger.fileno())


async def main(address: str, url: str, name: str, tag: str, stop: str, ledger: str) -> None:
    import ray

    from actors import Orchestrator
    from cluster import connect

    connect(address=address, namespace="soloist-tests")
    _append_synced(f"{ledger}.node", ray.get_runtime_context().get_node_id())
    orch = Orchestrator.attach(name, store=url)
    i = 0
    while not os.path.exists(stop):
        request_id = f"{tag}-{i}"
        version = await orch.apply(bump, request_id=request_id)
        _append_synced(ledger, f"{version} {request_id}\n")
        i += 1


if __name__ == "__main__":
    address, url, name, tag, stop, ledger = sys.argv[1:7]
    asyncio.run(main(address, url, name, tag, stop, ledger))
