"""A driver process for the driver-kill test: joins the test's Ray, writes, gets SIGKILLed.

Creates the durable orchestrator ``NAME`` (store ``STORE``) and applies ``COUNT``
increments with request ids ``req-<i>`` from four concurrent writers, printing
``ACK <i> <version>`` (flushed) after each acknowledgement. The test kills this process
mid-run. Usage: ``python _driver.py GCS_ADDRESS STORE NAME COUNT``.
"""

from __future__ import annotations

import asyncio
import sys

import ray
from pydantic import BaseModel


class Counter(BaseModel):
    count: int = 0
    seen: list[str] = []


def increment(request: str):  # noqa: ANN201 - a closure factory
    def fn(state: Counter) -> None:
        state.count += 1
        state.seen.append(request)

    return fn


async def main(store: str, name: str, count: int) -> None:
    from actors import Orchestrator

    orch = Orchestrator(Counter(), name=name, store=store, durability="sync")
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async def writer() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            version = await orch.apply(increment(f"req-{i}"), request_id=f"req-{i}")
            sys.stdout.write(f"ACK {i} {version}\n")
            sys.stdout.flush()

    await asyncio.gather(*(writer() for _ in range(4)))


if __name__ == "__main__":
    ray.init(address=sys.argv[1], namespace="soloist-tests", log_to_driver=False)
    asyncio.run(main(sys.argv[2], sys.argv[3], int(sys.argv[4])))
