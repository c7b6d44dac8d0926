"""A driver for the resume tests: joins the test's Ray, runs the three user coordinators on a
durable orchestrator until they ask for two approvals, prints ``WAITING <id> <id>`` and then
waits forever, to be SIGKILLed (its run's actor dies with it, as a crashed driver's does).
Usage: ``python _run_waiting_driver.py ADDRESS STORE NAME LOG``.
"""

from __future__ import annotations

import asyncio
import sys

import cloudpickle


async def main(address: str, store: str, name: str, log: str) -> None:
    import tests.actors.run_fixtures as fixtures
    from actors import Orchestrator, Run
    from cluster import connect
    from coordinators import AgentState

    cloudpickle.register_pickle_by_value(fixtures)  # the coordinators and skills reach workers by value
    connect(address=address, namespace="soloist-tests")
    orch = Orchestrator(AgentState(), caller=fixtures.skill_registry(), name=name, store=store)
    outcome = await Run(orch, fixtures.three(log, approve="each"), first="planner", fallback="reviewer").run("go")
    ids = " ".join(i.id for i in outcome.interrupts)
    sys.stdout.write(f"{outcome.status.upper()} {ids}\n")
    sys.stdout.flush()
    await asyncio.Event().wait()  # the test kills this process here


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
