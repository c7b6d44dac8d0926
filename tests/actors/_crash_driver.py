"""A driver process for the crash tests (tests/actors/test_durable_crash.py).

Joins the Ray cluster at ``ADDRESS`` (the test module's own, never the session's: the test
kills processes of it), creates a durable orchestrator and applies ``count``
increments, each with an explicit request id, from ``concurrency`` concurrent writers. Every
``resend_every``-th request id is sent a second time on purpose. It prints one line per
event, flushed, for the test to parse:

- ``PID <pid>``: the process holding the orchestrator (again after every restart);
- ``ACK <i> <version>``: request ``req-<i>`` was acknowledged at ``version``;
- ``RESEND <i> <version>``: the deliberate resend of ``req-<i>`` returned ``version``;
- ``FINAL <count> <version> <duplicates>``: the state after the last acknowledgement.

The test kills the worker with SIGKILL while this runs. The last ``HOLD_TAIL`` requests
wait until the test writes a line to stdin (or closes it): the run cannot end before the
test has made all its kills, however the machine schedules the two processes. Usage:
``python _crash_driver.py ADDRESS STORE MODE COUNT CONCURRENCY RESEND_EVERY HOLD_TAIL hosted|dedicated``
(hosted: the run lives on a shared host actor, and the host is the process killed). The run
is named ``crash-MODE-PLACEMENT``.
"""

from __future__ import annotations

import asyncio
import os
import sys

import ray
from pydantic import BaseModel


class Counter(BaseModel):
    count: int = 0


def increment(state: Counter) -> None:
    state.count += 1


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _watch_pid(actor: object, stop: asyncio.Event) -> None:
    """Report the orchestrator's worker pid whenever it changes (i.e. after a restart)."""
    last = None
    while not stop.is_set():
        try:
            pid = await actor.__ray_call__.remote(lambda self: os.getpid())  # type: ignore[attr-defined]
        except (ray.exceptions.ActorUnavailableError, ray.exceptions.RayActorError) as exc:
            print(f"pid probe: orchestrator unavailable ({type(exc).__name__}); retrying", file=sys.stderr)
        else:
            if pid != last:
                last = pid
                _out(f"PID {pid}")
        try:
            await asyncio.wait_for(stop.wait(), 0.05)
        except asyncio.TimeoutError:
            continue


async def main(store: str, mode: str, count: int, concurrency: int, resend_every: int, hold_tail: int, placement: str) -> None:
    from actors import Orchestrator, actor_name, run_host_name
    from cluster import SOLOIST_NAMESPACE

    name = f"crash-{mode}-{placement}"
    dedicated = placement == "dedicated"
    orch = Orchestrator(Counter(), name=name, store=store, durability=mode, checkpoint_every=100, dedicated=dedicated)
    stop = asyncio.Event()
    # The process that holds the run: its own actor, or the host actor its name maps to.
    holder = ray.get_actor(actor_name(name) if dedicated else run_host_name(name), namespace=SOLOIST_NAMESPACE)
    watcher = asyncio.create_task(_watch_pid(holder, stop))
    # Done once the test says go (a line on stdin, or stdin closed); blocks nothing meanwhile.
    go = asyncio.ensure_future(asyncio.to_thread(sys.stdin.readline))
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async def writer() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            if i >= count - hold_tail:
                await go
            version = await orch.apply(increment, request_id=f"req-{i}")
            _out(f"ACK {i} {version}")
            if resend_every and i % resend_every == 0:
                again = await orch.apply(increment, request_id=f"req-{i}")
                _out(f"RESEND {i} {again}")

    await asyncio.gather(*(writer() for _ in range(concurrency)))
    stop.set()
    await watcher
    version, state = await orch.versioned_snapshot()
    stats = await orch.statistics()
    _out(f"FINAL {state.count} {version} {stats.duplicate_requests}")
    await orch.close()


if __name__ == "__main__":
    from cluster import connect

    address, path, durability = sys.argv[1:4]
    n, conc, every, tail = map(int, sys.argv[4:8])
    placement = sys.argv[8]
    connect(address, namespace="soloist-tests", log_to_driver=False)  # stdout carries this driver's lines alone
    try:
        asyncio.run(main(path, durability, n, conc, every, tail, placement))
    finally:
        ray.shutdown()
