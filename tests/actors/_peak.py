"""A counter actor the skills under test report to, so in-flight peaks are measured where the work runs."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import ray
from pydantic import BaseModel

from actors import SkillRegistry

NAMESPACE = "soloist-tests"


@ray.remote(num_cpus=0)
class PeakCounter:
    """Current and peak number of skill bodies running, plus what happened to each."""

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0
        self.finished = 0
        self.cancelled = 0
        self.nodes: set[str] = set()

    def enter(self, node: str = "") -> int:
        self.current += 1
        self.peak = max(self.peak, self.current)
        if node:
            self.nodes.add(node)
        return self.current

    def exit(self, outcome: str = "finished") -> None:
        self.current -= 1
        if outcome == "cancelled":
            self.cancelled += 1
        else:
            self.finished += 1

    def report(self) -> dict[str, Any]:
        return {"current": self.current, "peak": self.peak, "finished": self.finished,
                "cancelled": self.cancelled, "nodes": sorted(self.nodes)}

    def reset(self) -> None:
        self.__init__()


def new_counter() -> tuple[str, Any]:
    name = f"peak-{uuid.uuid4().hex[:8]}"
    return name, PeakCounter.options(name=name, namespace=NAMESPACE).remote()


class SleepIn(BaseModel):
    counter: str
    seconds: float = 0.2
    tag: int = 0


class SleepOut(BaseModel):
    tag: int
    node: str


def sleepy_registry(**kwargs: Any) -> SkillRegistry:
    skills = SkillRegistry(**kwargs)

    @skills.skill("sleep")
    async def sleep(inp: SleepIn) -> SleepOut:
        node = ray.get_runtime_context().get_node_id()
        counter = ray.get_actor(inp.counter, namespace=NAMESPACE)
        await counter.enter.remote(node)
        try:
            await asyncio.sleep(inp.seconds)
        except asyncio.CancelledError:
            counter.exit.remote("cancelled")  # submitted without waiting: this task is being cancelled
            raise
        await counter.exit.remote("finished")
        return SleepOut(tag=inp.tag, node=node)

    return skills
