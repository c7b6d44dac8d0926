"""A driver that uses a pool with ``min_replicas`` and ends without closing its run (as a
crashed driver does), for tests/actors/test_pool_users.py.

Joins the Ray cluster at ``ADDRESS``, opens a run whose caller's pool keeps one replica,
hands off once, prints ``PREFIX <the pool's replica name prefix>`` and exits at once,
closing nothing. Usage: ``python _pool_user_driver.py ADDRESS NAMESPACE SKILL``.
"""

from __future__ import annotations

import asyncio
import os
import sys

import ray
from pydantic import BaseModel

from actors import Call, Orchestrator, PoolPolicy, SkillRegistry, handoff
from tests._models import Empty


class EchoIn(BaseModel):
    n: int = 0


class EchoOut(BaseModel):
    n: int


DOWNSCALE_S = 0.5


def echo(inp: EchoIn) -> EchoOut:
    return EchoOut(n=inp.n)


def kept_registry(skill: str) -> SkillRegistry:
    """A registry of its own (a pool key of its own) whose pool keeps one replica."""
    registry = SkillRegistry(policy=PoolPolicy(min_replicas=1, max_replicas=2, downscale_delay_s=DOWNSCALE_S))
    registry.register(skill, echo)
    return registry


async def main(skill: str) -> None:
    registry = kept_registry(skill)
    run = Orchestrator(Empty(), caller=registry)
    assert (await handoff(run, Call(skill, EchoIn(n=7)), EchoOut)).n == 7
    sys.stdout.write(f"PREFIX soloist:sub:{registry.pool_key}:{skill}:\n")
    sys.stdout.flush()


if __name__ == "__main__":
    address, namespace, skill = sys.argv[1:4]
    ray.init(address=address, namespace=namespace, log_to_driver=False)
    asyncio.run(main(skill))
    os._exit(0)  # no close, no atexit: the process just ends
