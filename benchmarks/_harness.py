"""What every measure shares: the Ray session, the workloads, the raw-Ray baselines, timing.

The baselines are deliberately the *equivalent* plain-Ray program, not a straw man: an async
actor with the same options as the orchestrator actor (``num_cpus=0``, high concurrency), and
for handoffs an actor that holds the same ``SkillRegistry`` and calls the same skill.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import cloudpickle
import ray
import ray.cloudpickle
from pydantic import BaseModel

from actors import Orchestrator, SkillRegistry, ToolCallResult
from benchmarks.config import BenchConfig
from cluster import metrics

__all__ = [
    "BenchContext", "Progress", "NoopIn", "NoopOut", "SleepIn", "SleepOut", "Counter", "bump", "make_registry",
    "RawCounter", "RawHolder", "RawSubagent", "ensure_ray", "ship_by_value", "timed", "interleaved", "close_run",
    "run_name", "BurnIn", "BurnOut", "burn", "calibrate_burn", "load_average", "start_runs",
]

_log = logging.getLogger("soloist.bench")
_LOG_EXTRA = {"component": "bench"}
NAMESPACE = "soloist-bench"
_OBJECT_STORE_BYTES = 512 * 1024 * 1024


# ----------------------------------------------------------------- workloads


class NoopIn(BaseModel):
    #: None: nothing. True/False: turn metrics on/off in the subagent process that runs this
    #: call (the observability measure sends one to every replica of the ``noop`` pool).
    metrics: bool | None = None


class NoopOut(BaseModel):
    pass


class SleepIn(BaseModel):
    seconds: float


class SleepOut(BaseModel):
    slept: float


class Counter(BaseModel):
    """The small state of the apply and recovery measures."""

    n: int = 0


def bump(state: Counter) -> None:
    """The apply ``fn`` of the throughput measures: the smallest real write."""
    state.n += 1


async def _noop(inp: NoopIn) -> NoopOut:
    if inp.metrics is not None:
        (metrics.enable if inp.metrics else metrics.disable)()
    return NoopOut()


async def _sleep(inp: SleepIn) -> SleepOut:
    await asyncio.sleep(inp.seconds)
    return SleepOut(slept=inp.seconds)


class BurnIn(BaseModel):
    iterations: int


class BurnOut(BaseModel):
    total: int


def burn(inp: BurnIn) -> BurnOut:
    """Pure-Python CPU work (holds the GIL throughout): the CPU-bound skill of the fan-out."""
    total = 0
    for i in range(inp.iterations):
        total += i * i % 7
    return BurnOut(total=total)


def calibrate_burn(seconds: float) -> int:
    """Iterations of ``burn`` that take about ``seconds`` of CPU in this process."""
    iterations = 50_000
    while True:
        started = time.process_time()
        burn(BurnIn(iterations=iterations))
        took = time.process_time() - started
        if took >= 0.05:
            return max(1, int(iterations * seconds / took))
        iterations *= 4


#: How long an idle bench replica stays up: longer than any pause between or inside measures,
#: so a figure never includes re-creating a replica that retired meanwhile.
BENCH_RETIRE_AFTER_S = 300.0


def make_registry(replicas: int = 4) -> SkillRegistry:
    """Skills ``noop`` and ``sleep`` (async, so a replica serves many calls at once), and
    ``burn`` (sync CPU work: one call per replica at a time, each replica its own process).
    Replicas stay up for ``BENCH_RETIRE_AFTER_S`` when idle: no measure's idle gap retires one."""
    skills = SkillRegistry(replicas=replicas, retire_after_s=BENCH_RETIRE_AFTER_S)
    skills.register("noop", _noop)
    skills.register("sleep", _sleep)
    skills.register("burn", burn)
    return skills


# --------------------------------------------------------- raw-Ray baselines


@ray.remote(num_cpus=0, max_concurrency=1000)
class RawCounter:
    """The raw ceiling for apply: an async actor holding a ``Counter`` that applies the same
    pickled ``fn`` it is sent, with the same token and request id arguments as ``apply``."""

    def __init__(self) -> None:
        self.state = Counter()
        self.version = 0

    async def apply_fn(self, token: str, request_id: str, fn: Callable[[Any], Any]) -> int:
        fn(self.state)
        self.version += 1
        return self.version


@ray.remote(num_cpus=0, max_concurrency=1000)
class RawHolder:
    """Holds one object and returns it: the raw ceiling for a snapshot."""

    def __init__(self, value: Any) -> None:
        self.value = value

    async def get(self) -> Any:
        return self.value

    async def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0, max_concurrency=64)
class RawSubagent:
    """The raw equivalent of a subagent: holds the same caller, calls the same skill."""

    def __init__(self, caller: Any) -> None:
        self.caller = caller

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolCallResult:
        return await self.caller.call_tool(name, arguments)


# ------------------------------------------------------------------- session


def ship_by_value() -> None:
    """Pickle this package by value: Ray workers may not have ``benchmarks`` on their path.

    Registered with Ray's vendored cloudpickle (what ships task arguments) and with the
    ``cloudpickle`` package (what the store uses to record a run's spec).
    """
    package = sys.modules["benchmarks"]
    for pickler in (cloudpickle, ray.cloudpickle):
        pickler.register_pickle_by_value(package)  # idempotent: a set of module names


def ensure_ray(num_cpus: int | None = None) -> bool:
    """Start a private local Ray unless this process is connected; True if it started one.

    ``address="local"`` on purpose: a bare ``ray.init()`` joins any cluster another process
    on this machine happens to be running, and its numbers would not be this run's.
    """
    if ray.is_initialized():
        return False
    ray.init(
        address="local",
        num_cpus=num_cpus or max(4, os.cpu_count() or 1),
        include_dashboard=False,
        object_store_memory=_OBJECT_STORE_BYTES,
        namespace=NAMESPACE,
        log_to_driver=False,
    )
    return True


def run_name(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:8]}"


async def close_run(orch: Orchestrator[Any]) -> None:
    """Close an orchestrator; its semaphore actor ends with it (the last run of its scope)."""
    await orch.close()


async def start_runs(*factories: Callable[[], Orchestrator[Any]]) -> list[Orchestrator[Any]]:
    """Construct several orchestrators at once, each in a thread (the constructor blocks until
    its actor answers), so their processes start side by side instead of one after the
    other. If one fails, the others are closed and the first error is raised."""
    made = await asyncio.gather(*[asyncio.to_thread(factory) for factory in factories], return_exceptions=True)
    failed = [r for r in made if isinstance(r, BaseException)]
    if failed:
        for orch in made:
            if isinstance(orch, Orchestrator):
                await close_run(orch)
        raise failed[0]
    return list(made)  # type: ignore[arg-type]


# -------------------------------------------------------------------- timing


async def timed(work: Callable[[], Awaitable[Any]]) -> float:
    """Seconds ``work()`` takes, wall clock."""
    started = time.perf_counter()
    await work()
    return time.perf_counter() - started


async def interleaved(
    ours: Callable[[], Awaitable[Any]], base: Callable[[], Awaitable[Any]], rounds: int
) -> tuple[list[float], list[float]]:
    """Seconds of ``ours()`` and of ``base()`` in each of ``rounds`` rounds, interleaved.

    Each round times both, alternating which goes first, so drift in the machine's load
    hits both sides alike; the caller reports the median of per-round ratios and their spread.
    """
    mine: list[float] = []
    theirs: list[float] = []
    for i in range(rounds):
        if i % 2 == 0:
            mine.append(await timed(ours))
            theirs.append(await timed(base))
        else:
            theirs.append(await timed(base))
            mine.append(await timed(ours))
    return mine, theirs


def load_average() -> tuple[float, float, float] | None:
    """The machine's 1/5/15-minute load average (None where the OS has none)."""
    try:
        return os.getloadavg()
    except OSError:
        return None


# ------------------------------------------------------------------- context


class Progress(Protocol):
    """What the runner reports to: a progress bar, or nothing."""

    def begin(self, name: str, title: str, steps: int) -> None: ...

    def advance(self, name: str, text: str) -> None: ...

    def end(self, name: str) -> None: ...


class _Silent:
    def begin(self, name: str, title: str, steps: int) -> None:
        pass

    def advance(self, name: str, text: str) -> None:
        pass

    def end(self, name: str) -> None:
        pass


@dataclass
class BenchContext:
    """Handed to every measure: the sizes, the shared skills, and the progress sink."""

    config: BenchConfig
    progress: Progress = field(default_factory=_Silent)
    measure: str = ""
    _registry: SkillRegistry | None = None
    _raw: list[Any] = field(default_factory=list)
    _run: Orchestrator[Any] | None = None

    @property
    def skills(self) -> SkillRegistry:
        """One registry for the whole run, so subagent pools start once and are reused."""
        if self._registry is None:
            self._registry = make_registry(self.config.replicas)
        return self._registry

    def raw_subagents(self) -> list[Any]:
        """As many raw subagents as the registry has replicas per skill, started once per run."""
        if not self._raw:
            self._raw = [RawSubagent.remote(self.skills) for _ in range(self.config.replicas)]
        return self._raw

    async def handoff_run(self) -> Orchestrator[Any]:
        """One run handing off to the shared skills, started on first use and kept for every
        measure that only hands off (its state is never written): starting an orchestrator
        costs two worker processes, which is most of a short measure's time on 2 cores.
        Closed by ``close_handoff_run`` (the runner does, before Ray stops)."""
        if self._run is None:
            skills = self.skills
            self._run = await asyncio.to_thread(lambda: Orchestrator(Counter(), caller=skills, name=run_name("handoffs")))
        return self._run

    async def close_handoff_run(self) -> None:
        """Close the shared handoff run, if one was started."""
        run, self._run = self._run, None
        if run is not None:
            await close_run(run)

    async def reset_skills(self) -> None:
        """Close the shared run and forget the registry and the raw subagents (a new Ray
        session needs new ones)."""
        await self.close_handoff_run()
        self._registry = None
        self._raw = []

    def step(self, text: str) -> None:
        self.progress.advance(self.measure, text)
        _log.info("%s: %s", self.measure, text, extra=_LOG_EXTRA)
