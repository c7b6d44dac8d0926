"""A driver for the resume tests: starts its own Ray, runs the three user coordinators on a
durable orchestrator until they ask for two approvals, prints ``WAITING <id> <id>`` and then
waits forever, to be SIGKILLed. Usage: ``python _run_waiting_driver.py STORE NAME LOG``.
"""

from __future__ import annotations

import asyncio
import sys

import cloudpickle


async def main(store: str, name: str, log: str) -> None:
    import tests.actors.run_fixtures as fixtures
    from actors import Orchestrator, Run
    from cluster import connect
    from coordinators import AgentState

    cloudpickle.register_pickle_by_value(fixtures)  # the coordinators and skills reach workers by value
    connect(num_cpus=2)
    orch = Orchestrator(AgentState(), caller=fixtures.skill_registry(), name=name, store=store)
    outcome = await Run(orch, fixtures.three(log, approve="each"), first="planner", fallback="reviewer").run("go")
    ids = " ".join(i.id for i in outcome.interrupts)
    sys.stdout.write(f"{outcome.status.upper()} {ids}\n")
    sys.stdout.flush()
    await asyncio.Event().wait()  # the test kills this process here


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
