"""A driver for the single-activation race (tests/actors/test_run_hosts.py).

Joins the test's Ray, waits until GO_FILE exists (so two of these attach at the same
moment), attaches to the stored run NAME with STORE and applies COUNT increments with the
request ids ``<TAG>-<i>``. Prints ``ACK <request id> <version>`` per acknowledgement and
``DONE <host pid> <epoch>`` at the end. Usage:
``python _host_race_driver.py ADDRESS STORE NAME TAG COUNT GO_FILE``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path


def bump(state: object) -> None:
    state.n += 1  # type: ignore[attr-defined]  # the test's Tally


async def main(address: str, store: str, name: str, tag: str, count: int, go: str) -> None:
    from actors import Orchestrator
    from cluster import connect

    connect(address=address, namespace="soloist-tests")
    while not Path(go).exists():  # the test's barrier: both drivers attach together
        time.sleep(0.005)
    orch = Orchestrator.attach(name, store=store)
    for i in range(count):
        version = await orch.apply(bump, request_id=f"{tag}-{i}")
        print(f"ACK {tag}-{i} {version}", flush=True)
    stats = await orch.statistics()
    print(f"DONE {stats.pid} {stats.epoch}", flush=True)


if __name__ == "__main__":
    address, store, name, tag, count, go = sys.argv[1:7]
    asyncio.run(main(address, store, name, tag, int(count), go))
