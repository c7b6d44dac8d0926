"""What the cap tests measure with: skill bodies that report their own intervals.

Every body tells one ``Intervals`` actor when it starts and when it ends, from its own
process, and ticks while it works; the peak is the largest number of those intervals that
overlap (computed from the reports, never from the runtime's counters). Bodies can be held
open by a ``Gate`` (tests wait on events, not clocks).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import ray
from pydantic import BaseModel

from actors import SkillRegistry
from tests._waits import HANG_GUARD_S, eventually

NAMESPACE = "soloist-tests"


@ray.remote(num_cpus=0)
class Intervals:
    """Start/end of every body (on this actor's clock), who ran it, and how long it waited."""

    def __init__(self) -> None:
        self.open: dict[str, tuple[float, str, int]] = {}
        self.closed: list[tuple[float, float, str, str]] = []  # start, end, tag, outcome
        self.pids: dict[str, int] = {}
        self.ticks = 0
        self.max_wait = 0.0
        self.waits: list[tuple[str, float]] = []  # (tag, wait) in the order bodies started

    def enter(self, body: str, tag: str, pid: int, waited: float) -> None:
        self.open[body] = (time.monotonic(), tag, pid)
        self.pids[body] = pid
        self.max_wait = max(self.max_wait, waited)
        self.waits.append((tag, waited))

    def tick(self, body: str) -> None:
        self.ticks += 1

    def exit(self, body: str, outcome: str = "finished") -> None:
        start, tag, _ = self.open.pop(body)
        self.closed.append((start, time.monotonic(), tag, outcome))

    def killed(self, pid: int) -> None:
        """The process ``pid`` was killed: its open bodies ended now (at the latest)."""
        for body in [b for b, (_, _, p) in self.open.items() if p == pid]:
            self.exit(body, "killed")

    def report(self) -> dict[str, Any]:
        now = time.monotonic()
        spans = [(s, e) for s, e, _, _ in self.closed] + [(s, now + 1e6) for s, _, _ in self.open.values()]
        events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
        current = peak = 0
        for _, step in events:
            current += step
            peak = max(peak, current)
        by_tag: dict[str, int] = {}
        for _, _, tag, outcome in self.closed:
            if outcome == "finished":
                by_tag[tag] = by_tag.get(tag, 0) + 1
        return {
            "peak": peak, "running": len(self.open), "finished": sum(1 for c in self.closed if c[3] == "finished"),
            "cancelled": sum(1 for c in self.closed if c[3] == "cancelled"), "by_tag": by_tag,
            "running_tags": sorted(t for _, t, _ in self.open.values()), "max_wait": self.max_wait,
            "pids": sorted({pid for _, _, pid in self.open.values()}),
            "waits": self.waits,
        }

    def dump(self) -> dict[str, Any]:
        """Every interval as recorded (for a failure message)."""
        return {"open": dict(self.open), "closed": sorted(self.closed)}

    def spans(self, tag: str) -> list[tuple[float, float]]:
        return [(s, e) for s, e, t, _ in self.closed if t == tag]


@ray.remote(num_cpus=0)
class Gate:
    """Bodies given this gate work until it opens."""

    def __init__(self) -> None:
        self.opened = False

    def open(self) -> None:
        self.opened = True

    def is_open(self) -> bool:
        return self.opened


def new_named(cls: Any) -> tuple[str, Any]:
    name = f"cap-{uuid.uuid4().hex[:8]}"
    return name, cls.options(name=name, namespace=NAMESPACE).remote()


class WorkIn(BaseModel):
    intervals: str
    tag: str = ""
    gate: str = ""  # work until this gate opens; else for `seconds`
    seconds: float = 0.0
    sent_at: float = 0.0  # the requester's time.monotonic() (one machine: one clock)


class WorkOut(BaseModel):
    tag: str
    pid: int


def _actor(name: str) -> Any:
    return ray.get_actor(name, namespace=NAMESPACE)


def cap_registry(**kwargs: Any) -> SkillRegistry:
    """``work`` (async) and ``work_sync`` (sync, in a thread): report, tick, end."""
    skills = SkillRegistry(**kwargs)

    @skills.skill("work")
    async def work(inp: WorkIn) -> WorkOut:
        body = uuid.uuid4().hex
        intervals = _actor(inp.intervals)
        waited = time.monotonic() - inp.sent_at if inp.sent_at else 0.0
        try:
            # Inside the try: a body cancelled while its start report is on the way must
            # still report its end, or its interval would stay open for ever. The two calls
            # come from one process to one actor, so the end never arrives before the start.
            await intervals.enter.remote(body, inp.tag, os.getpid(), waited)
            deadline = time.monotonic() + inp.seconds
            while (await _actor(inp.gate).is_open.remote()) is False if inp.gate else time.monotonic() < deadline:
                intervals.tick.remote(body)
                await asyncio.sleep(0.02)
        except asyncio.CancelledError:
            # Report the end before the body really ends (and its permit is given back), or a
            # later body's start could reach the counter first and look like an overlap.
            await asyncio.shield(intervals.exit.remote(body, "cancelled"))
            raise
        await intervals.exit.remote(body)
        return WorkOut(tag=inp.tag, pid=os.getpid())

    @skills.skill("work_sync")
    def work_sync(inp: WorkIn) -> WorkOut:
        body = uuid.uuid4().hex
        intervals = _actor(inp.intervals)
        waited = time.monotonic() - inp.sent_at if inp.sent_at else 0.0
        ray.get(intervals.enter.remote(body, inp.tag, os.getpid(), waited))
        deadline = time.monotonic() + inp.seconds
        while ray.get(_actor(inp.gate).is_open.remote()) is False if inp.gate else time.monotonic() < deadline:
            intervals.tick.remote(body)
            time.sleep(0.02)
        ray.get(intervals.exit.remote(body))
        return WorkOut(tag=inp.tag, pid=os.getpid())

    return skills


async def wait_for(predicate: Any, what: str, timeout: float = HANG_GUARD_S) -> Any:
    """Until the async ``predicate`` returns something truthy (the suite's ``eventually``)."""
    return await eventually(predicate, bool, what, timeout)


_DRIVER = Path(__file__).with_name("_cap_driver.py")
_REPO = Path(__file__).resolve().parents[2]


def start_driver(*args: str) -> subprocess.Popen[str]:
    """``_cap_driver.py MODE ADDRESS ARGS...`` in its own process, joined to this test's Ray."""
    env = {**os.environ, "PYTHONPATH": str(_REPO)}
    address = ray.get_runtime_context().gcs_address
    return subprocess.Popen([sys.executable, str(_DRIVER), args[0], address, *args[1:]], cwd=_REPO, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


async def read_line(proc: subprocess.Popen[str], prefix: str) -> str:
    """The driver's next output line that starts with ``prefix`` (it announces its steps)."""
    while True:
        line = await asyncio.to_thread(proc.stdout.readline)  # type: ignore[union-attr]
        assert line, f"driver exited before printing {prefix!r} (code {proc.poll()})"
        if line.startswith(prefix):
            return line.strip()
