"""A driver process for the console test: a job of its own on the test session's Ray, a few
runs each handing off to a plain synchronous skill, everything Ray forwards from its job's
workers on this process's console.

``python -m tests.actors._sync_skill_driver RUNS ADDRESS``: prints ``DONE <outputs>`` at the end.
"""

from __future__ import annotations

import asyncio
import sys

import ray
from pydantic import BaseModel

from actors import Call, Orchestrator, SkillRegistry, handoff
from tests._models import Empty


class EchoIn(BaseModel):
    text: str


class EchoOut(BaseModel):
    text: str


def echo(inp: EchoIn) -> EchoOut:
    """A plain synchronous skill: it runs in a thread of its subagent."""
    return EchoOut(text=inp.text.upper())


async def main(runs: int) -> None:
    outputs = []
    for i in range(runs):
        # Registries that differ (in size): each run's call starts a replica process of its own.
        registry = SkillRegistry(replicas=1 + i)
        registry.register("echo", echo)
        orch = Orchestrator(Empty(), caller=registry)
        try:
            outputs.append((await handoff(orch, Call("echo", EchoIn(text=f"run{i}")), EchoOut)).text)
        finally:
            await orch.close()
    sys.stdout.write(f"DONE {','.join(outputs)}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    ray.init(address=sys.argv[2], log_to_driver=True)
    try:
        asyncio.run(main(int(sys.argv[1])))
    finally:
        ray.shutdown()
