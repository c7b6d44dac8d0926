"""A driver process of the multi-driver measure: attach to a run and hand off on command.

Started by ``benchmarks.multi_driver`` as ``python -m benchmarks._driver_child ADDRESS RUN
CALLS SLEEP_S``. It connects to the parent's Ray, attaches to the named run (a read-only
handle is enough to hand off), warms up, prints ``ready``; then for each ``go`` line on
stdin it hands off CALLS sleeping calls in one ``parallel_handoff`` and prints one JSON line
``{"start": ..., "end": ..., "failed": ...}`` (wall-clock ``time.time()``, comparable
across processes on one machine); ``stop`` (or end of input) ends it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import ray

from actors import Call, Orchestrator, parallel_handoff
from benchmarks._harness import NAMESPACE, SleepIn, SleepOut, ship_by_value


async def _main(address: str, run: str, calls: int, sleep_s: float) -> None:
    ship_by_value()
    ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
    orch = Orchestrator.attach(run)
    batch = [Call("sleep", SleepIn(seconds=sleep_s))] * calls
    await parallel_handoff(orch, batch[:4], SleepOut)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        start = time.time()
        results = await parallel_handoff(orch, batch, SleepOut)
        end = time.time()
        print(json.dumps({"start": start, "end": end, "failed": sum(1 for r in results if r.error is not None)}), flush=True)


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
