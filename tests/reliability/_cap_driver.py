"""A second driver process for the cap tests: joins the test's Ray and hands off for a run.

``hold ADDRESS RUN INTERVALS GATE``: four gated ``work`` handoffs at once (the test
SIGSTOPs this process while they run); prints ``DONE <ok>``.
``fair ADDRESS RUN INTERVALS TAG SECONDS``: back-to-back handoffs from four workers for
SECONDS; prints ``COUNT <n>``.
``own ADDRESS SCOPE``: open a run on SCOPE and join its semaphore (as a first handoff does),
print ``READY``, wait for a line on stdin and exit without closing the run.
"""

from __future__ import annotations

import asyncio
import sys
import time

import ray

from actors import Call, Orchestrator, handoff, parallel_handoff
from tests.reliability._cap_support import WorkIn, WorkOut


async def hold(run: str, intervals: str, gate: str) -> None:
    orch = Orchestrator.attach(run)
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    calls = [Call("work", WorkIn(intervals=intervals, tag="driver", gate=gate)) for _ in range(4)]
    results = await parallel_handoff(orch, calls, WorkOut)
    sys.stdout.write(f"DONE {sum(r.ok for r in results)}\n")
    sys.stdout.flush()


async def fair(run: str, intervals: str, tag: str, seconds: float) -> None:
    orch = Orchestrator.attach(run)
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    # Both processes start together: the test writes a line once both are ready.
    sys.stdin.readline()
    end = time.monotonic() + seconds
    count = 0

    async def worker() -> None:
        nonlocal count
        while time.monotonic() < end:
            inp = WorkIn(intervals=intervals, tag=tag, seconds=0.02, sent_at=time.monotonic())
            await handoff(orch, Call("work", inp), WorkOut)
            count += 1

    await asyncio.gather(*(worker() for _ in range(4)))
    sys.stdout.write(f"COUNT {count}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    ray.init(address=sys.argv[2], namespace="soloist-tests", log_to_driver=False)
    if sys.argv[1] == "hold":
        asyncio.run(hold(sys.argv[3], sys.argv[4], sys.argv[5]))
    elif sys.argv[1] == "own":
        from pydantic import BaseModel

        class Empty(BaseModel):
            pass

        orch = Orchestrator(Empty(), semaphore_scope=sys.argv[3])
        asyncio.run(orch.join_semaphore())
        sys.stdout.write("READY\n")
        sys.stdout.flush()
        sys.stdin.readline()
    else:
        asyncio.run(fair(sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6])))
