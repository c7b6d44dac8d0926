"""A driver for the batch crash test: joins the test's Ray, starts a durable run whose first
turn hands off two fast and two slow calls (``tests.actors.batch_fixtures``), prints
``STARTED`` and drives it; the test SIGKILLs this process while the slow calls block.
Usage: ``python _run_batch_driver.py ADDRESS STORE NAME LEDGER RELEASE``.
"""

from __future__ import annotations

import asyncio
import sys

import cloudpickle


async def main(address: str, store: str, name: str, ledger: str, release: str) -> None:
    import tests.actors.batch_fixtures as fixtures
    from actors import Orchestrator, Run
    from cluster import connect
    from coordinators import AgentState

    cloudpickle.register_pickle_by_value(fixtures)  # the coordinators and skills reach workers by value
    connect(address=address, namespace="soloist-tests")
    orch = Orchestrator(AgentState(), caller=fixtures.ledger_skills(), name=name, store=store)
    sys.stdout.write("STARTED\n")
    sys.stdout.flush()
    outcome = await Run(orch, [fixtures.Batcher(ledger, release), fixtures.Closer()], first="batcher").run("go")
    sys.stdout.write(f"ENDED {outcome.status}\n")  # only if the test failed to kill it in time
    sys.stdout.flush()
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
