"""A driver process for the pydantic-ai crash test (tests/pydantic_ai/test_crash_resume.py).

Joins the test's Ray, runs the test agent durably on a SQLite store under ``RUN_ID`` and
prints ``OUTPUT <json>`` when the agent answers. With ``HOLD_AT`` (a model request's
index, ``-`` for none) the model holds that request until ``RELEASE`` appears: the test
SIGKILLs this process meanwhile. Usage:
``python _crash_driver.py ADDRESS STORE LEDGER RELEASE HOLD_AT RUN_ID``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import cloudpickle


async def main(address: str, store: str, ledger: str, release: str, hold_at: str, run_id: str) -> None:
    import tests._ledger as ledger_module
    import tests.pydantic_ai._agents as agents
    from actors.pydantic_ai import SoloistAgent
    from cluster import connect

    for module in (agents, ledger_module):  # the model's function reaches the replicas by value
        cloudpickle.register_pickle_by_value(module)
    connect(address=address, namespace="soloist-tests")
    agent = agents.build_agent(Path(ledger), hold_at=None if hold_at == "-" else int(hold_at), release=Path(release))
    durable = SoloistAgent(agent, store=store)
    result = await durable.run("go", deps=ledger, run_id=run_id)
    sys.stdout.write(f"OUTPUT {json.dumps(result.output)}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
