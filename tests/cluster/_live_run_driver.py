"""A driver that keeps its run live for the single-writer CLI tests.

``python _live_run_driver.py ADDRESS STORE NAME LOG MODE [GO_FILE]``: ADDRESS ``embedded`` starts
this process's own embedded Ray (as a user's driver does), anything else joins that cluster.
It runs the three user coordinators on a durable orchestrator until they wait for two
approvals, prints ``WAITING <ray address> <actor pid> <id> <id>``, then

- MODE ``answer``: waits for GO_FILE, answers whatever is still open itself, resumes;
- MODE ``wait``: ``Run.resume_when_answered()`` (someone else answers).

and prints ``DONE <status> <version> <actor pid> <restarted>`` once the run ended, so the test
sees that this driver went on writing through the same orchestrator actor.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import cloudpickle


async def main(address: str, store: str, name: str, log: str, mode: str, go: str = "") -> None:
    import tests.actors.run_fixtures as fixtures
    from actors import Orchestrator, Run, answer_interrupt, open_interrupts
    from cluster import connect
    from coordinators import AgentState

    cloudpickle.register_pickle_by_value(fixtures)  # the coordinators and skills reach workers by value
    info = connect(None if address == "embedded" else address, namespace="soloist-tests")
    orch = Orchestrator(AgentState(), caller=fixtures.skill_registry(), name=name, store=store)
    run = Run(orch, fixtures.three(log, approve="each"), first="planner", fallback="reviewer")
    outcome = await run.run("go")
    stats = await orch.statistics()
    print(f"{outcome.status.upper()} {info.address} {stats.pid} {' '.join(i.id for i in outcome.interrupts)}", flush=True)
    if mode == "answer":
        while not Path(go).exists():  # the test's signal: its commands are done
            await asyncio.sleep(0.05)
        for interrupt in await open_interrupts(orch):
            await answer_interrupt(orch, interrupt.id, approve=True)
        outcome = await run.resume()
    else:
        started = time.monotonic()
        outcome = await run.resume_when_answered(timeout=600)
        print(f"RESUMED after {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
    stats = await orch.statistics()
    print(f"DONE {outcome.status} {await orch.version()} {stats.pid} {stats.restarted}", flush=True)
    await orch.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
