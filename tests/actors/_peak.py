"""A counter actor the skills under test report to, so in-flight peaks are measured where the work runs.

Tests wait on what the skill bodies report, never on the clock: ``until`` parks on the
counter until a figure is reached (``wait_until`` bounds that wait by ``HANG_GUARD_S``, which
only turns a hang into a failure), and a gated body (``SleepIn.gate``) stays inside after
``enter`` until the test calls ``open``. So "4 bodies ran at once" is a fact the test
observed, not a hope that ``sleep(1.0)`` was long enough on a busy machine.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import ray
from pydantic import BaseModel

from actors import Call, SkillRegistry
from tests._waits import HANG_GUARD_S, eventually

NAMESPACE = "soloist-tests"


@ray.remote(num_cpus=0)
class PeakCounter:
    """Current and peak number of skill bodies running, plus what happened to each.

    An async actor: calls run one at a time on its event loop (no await inside a count
    update), and ``until``/``gate`` park without blocking the counting calls.
    """

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0
        self.entered = 0
        self.finished = 0
        self.cancelled = 0
        self.nodes: set[str] = set()
        # The process of each body inside now (one entry per body): which replica runs what.
        self.inside: list[int] = []
        # Notified after every change of the figures above; ``until`` waits on it.
        self._changed = asyncio.Condition()
        # Set by ``open``; gated bodies wait for it after ``enter``.
        self._gate = asyncio.Event()

    async def enter(self, node: str = "", pid: int = 0) -> int:
        self.current += 1
        self.inside.append(pid)
        self.entered += 1
        self.peak = max(self.peak, self.current)
        if node:
            self.nodes.add(node)
        await self._notify()
        return self.current

    async def exit(self, outcome: str = "finished", pid: int = 0) -> None:
        self.current -= 1
        if pid in self.inside:
            self.inside.remove(pid)
        if outcome == "cancelled":
            self.cancelled += 1
        else:
            self.finished += 1
        await self._notify()

    def report(self) -> dict[str, Any]:
        return {"current": self.current, "peak": self.peak, "entered": self.entered, "finished": self.finished,
                "cancelled": self.cancelled, "nodes": sorted(self.nodes), "inside": sorted(self.inside)}

    async def reset(self) -> None:
        """Zero every figure and close the gate again (for the next gated batch)."""
        self.current = self.peak = self.entered = self.finished = self.cancelled = 0
        self.nodes = set()
        self.inside = []
        self._gate.clear()
        await self._notify()

    async def until(self, key: str, at_least: int) -> dict[str, Any]:
        """Park until ``report()[key] >= at_least``; returns the report at that moment."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.report()[key] >= at_least)
            return self.report()

    async def gate(self) -> None:
        """Park until the test calls ``open`` (a gated body calls this after ``enter``)."""
        await self._gate.wait()

    def open(self) -> None:
        """Let every gated body, parked or still to come, go on."""
        self._gate.set()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()


def new_counter() -> tuple[str, Any]:
    name = f"peak-{uuid.uuid4().hex[:8]}"
    return name, PeakCounter.options(name=name, namespace=NAMESPACE).remote()


async def wait_until(counter: Any, key: str, at_least: int, timeout: float = HANG_GUARD_S) -> dict[str, Any]:
    """Wait until the skill bodies have reported ``key >= at_least``; fail (not hang) after ``timeout``."""
    try:
        return await asyncio.wait_for(counter.until.remote(key, at_least), timeout)
    except TimeoutError:
        report = await counter.report.remote()
        raise AssertionError(f"the skill bodies never reported {key} >= {at_least} within {timeout:g}s: {report}") from None


async def open_when_in_flight(counter: Any, n: int = 4) -> dict[str, Any]:
    """Wait until ``n`` gated bodies are inside at once, then open the gate; returns that report."""
    report = await wait_until(counter, "current", n)
    await counter.open.remote()
    return report


class SleepIn(BaseModel):
    counter: str
    seconds: float = 0.2
    tag: int = 0
    gate: bool = False
    """Stay inside after ``enter`` until the counter's gate is open, then sleep ``seconds``."""


class SleepOut(BaseModel):
    tag: int
    node: str


def sleepy_registry(**kwargs: Any) -> SkillRegistry:
    skills = SkillRegistry(**kwargs)

    @skills.skill("sleep")
    async def sleep(inp: SleepIn) -> SleepOut:
        node = ray.get_runtime_context().get_node_id()
        counter = ray.get_actor(inp.counter, namespace=NAMESPACE)
        await counter.enter.remote(node, os.getpid())
        try:
            if inp.gate:
                await counter.gate.remote()
            await asyncio.sleep(inp.seconds)
        except asyncio.CancelledError:
            counter.exit.remote("cancelled", os.getpid())  # submitted without waiting: this task is being cancelled
            raise
        await counter.exit.remote("finished", os.getpid())
        return SleepOut(tag=inp.tag, node=node)

    return skills


#: Ray's death cause of an actor that ended itself: a replica that retired.
_RETIRED = "INTENDED_USER_EXIT"


async def replicas_answer(handles: list[Any], timeout: float = HANG_GUARD_S) -> None:
    """Until every replica answers a ping: one that Ray is restarting after a kill says
    ``ActorUnavailableError`` meanwhile, so it is asked again, up to ``timeout``. One that
    retired (idle past its pool's ``retire_after_s``, which a loaded machine's pauses between
    a test's steps reach) is done: its pool creates it again for the next call that wants it."""

    async def answers(handle: Any) -> bool:
        try:
            await handle.ping.remote()
        except ray.exceptions.ActorUnavailableError:
            return False
        except ray.exceptions.ActorDiedError as error:
            if _RETIRED in str(error):
                return True
            raise
        return True

    async def one(handle: Any) -> None:
        await eventually(lambda: answers(handle), bool, "a replica to answer again after its restart", timeout)

    await asyncio.gather(*(one(h) for h in handles))


def gated_calls(counter: str, n: int, seconds: float = 0.0, **call: Any) -> list[Any]:
    """``n`` gated ``sleep`` calls tagged ``0..n-1`` (each sleeps ``seconds`` once the gate opens)."""
    return [Call("sleep", SleepIn(counter=counter, seconds=seconds, tag=i, gate=True), **call) for i in range(n)]
