"""A driver process for the OpenAI Agents SDK crash and approval tests.

Joins the test's Ray, runs an agent durably on a SQLite store under ``RUN_ID`` against the
test's server and prints ``OUTPUT <json>`` when the run answers, or ``WAITING <n>`` when it
stops on ``n`` calls waiting for approval (it then waits until it is killed). ``AGENT`` is ``scribe`` (the crash test: the
server holds one request while the test SIGKILLs this process) or ``publisher``. Usage:
``python _crash_driver.py ADDRESS STORE BASE_URL LEDGER AGENT LABEL RUN_ID``.
"""

from __future__ import annotations

import asyncio
import json
import sys


async def main(address: str, store: str, base_url: str, ledger: str, agent: str, label: str, run_id: str) -> None:
    import cloudpickle

    import tests._ledger as ledger_module
    import tests.openai_agents._agents as agents
    from actors.openai_agents import SoloistRunner
    from cluster import connect

    for module in (agents, ledger_module):  # the model factory reaches the replicas by value
        cloudpickle.register_pickle_by_value(module)
    connect(address=address, namespace="soloist-tests")
    runner = SoloistRunner(store=store, model_factory=agents.factory(base_url))
    starting = agents.scribe() if agent == "scribe" else agents.publisher()
    result = await runner.run(starting, label, context=ledger, run_id=run_id, run_config=agents.QUIET)
    if result.interruptions:
        sys.stdout.write(f"WAITING {len(result.interruptions)}\n")
        sys.stdout.flush()
        await asyncio.Event().wait()  # a driver that waits with its run: the test SIGKILLs it
    sys.stdout.write(f"OUTPUT {json.dumps(result.final_output)}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:8]))
