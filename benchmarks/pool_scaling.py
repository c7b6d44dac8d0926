"""(11) Pool autoscaling (issue 28): a burst of sleeping calls from ten runs on a skill whose
pool starts at 1 replica, against a fixed pool started ahead of time and Ray Serve's autoscaling.

Ten runs (each its own orchestrator, default cap of 4, so up to 40 calls in flight) each hand
off 40 calls of a 100 ms async sleep in one ``parallel_handoff``: 400 calls, 1.0 s at best.
Three arms do the same work in every round, in rotating order:

- **autoscaled**: ``PoolPolicy(min_replicas=1, max_replicas=40)``, every other field at its
  default (target 8 ongoing calls per replica, grow at once, a replica retires after 10 s idle).
  Before each of its rounds the pool is back at 1 replica in Ray's table.
- **fixed**: ``PoolPolicy(min_replicas=40, max_replicas=40)``, every replica created and started
  before the first round (``pool_for(...).handles()``): the ideal, paying for 40 all the time.
- **serve**: a Ray Serve deployment with ``autoscaling_config={"min_replicas": 1,
  "max_replicas": 40}`` and every other setting at its documented default, called through a
  ``DeploymentHandle`` by ten concurrent "runs", each under an ``asyncio.Semaphore(4)``. Its
  replicas reserve no CPU (as soloist's replicas do), or a 4-CPU Ray could hold only four.
  Skipped, with the reason, when ``ray[serve]`` is not importable (the ``bench`` extra).

Everything is measured from outside the pools: a thread samples Ray's table of named actors
(every 50 ms during the burst, 100 ms after) from the burst's start until the end of a
burst-then-idle window of ``pool_window_s``, and counts the arm's live replica actors
(``soloist:sub:...`` names; Serve's ``SERVE_REPLICA::...``). Replica-seconds are the area under
that count (the cost); the time to the first scale-up runs from the burst's start until the
count first exceeds what it started at (a second replica is registered).
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import ray

from actors import Call, Orchestrator, PoolPolicy, SkillRegistry, parallel_handoff, pool_for
from benchmarks._harness import BenchContext, Counter, SleepIn, SleepOut, close_run, run_name, start_runs
from benchmarks.results import Figure, MeasureResult, fmt_ratio
from cluster import SOLOIST_NAMESPACE
from cluster import live_replica_names

NAME = "pool_scaling"
TITLE = "Pool autoscaling: a burst from concurrent runs (ten in full) vs a fixed pool started ahead and Ray Serve's defaults"
WALL_TARGET = 1.25  # autoscaled burst wall time within 1.25 of the fixed pool's
COST_TARGET = 0.5  # at most half the fixed pool's replica-seconds over the window
SERVE_TARGET = 1.0  # faster than Ray Serve's defaults
CAP = 4
AUTO, FIXED, SERVE = "autoscaled", "fixed", "serve"
ARMS = (AUTO, FIXED, SERVE)
SAMPLE_BURST_S = 0.05
SAMPLE_IDLE_S = 0.1
_SERVE_APP = "soloist-bench-pool-scaling"
_SERVE_NAMESPACE = "serve"
_SERVE_PREFIX = f"SERVE_REPLICA::{_SERVE_APP}#"
_QUEUE_PROBE_WARNING = "Failed to get queue length"


def steps(ctx: BenchContext) -> int:
    return 3 + ctx.config.pool_rounds


@dataclass
class ArmRound:
    """One arm's burst in one round, and its replica count over the window."""

    wall_s: float
    samples: list[tuple[float, int]]
    """``(seconds since the burst started, live replicas)``, the last one at the window's end."""

    @property
    def replica_seconds(self) -> float:
        return sum(n * (t1 - t0) for (t0, n), (t1, _) in zip(self.samples, self.samples[1:]))

    @property
    def window_s(self) -> float:
        return self.samples[-1][0]

    @property
    def start(self) -> int:
        return self.samples[0][1]

    @property
    def peak(self) -> int:
        return max(n for _, n in self.samples)

    @property
    def end(self) -> int:
        return self.samples[-1][1]

    def first_scale_up_s(self) -> float | None:
        """Seconds from the burst's start until the count first exceeded its start, or None."""
        return next((t for t, n in self.samples if n > self.start), None)


async def observe(burst: Callable[[], Awaitable[Any]], count: Callable[[], int], window_s: float) -> ArmRound:
    """Run ``burst`` while a thread samples ``count()`` (live replicas in Ray's table) until
    ``window_s`` after the burst's start, or until the burst ends if it runs longer."""
    first = count()
    samples: list[tuple[float, int]] = []
    failures: list[BaseException] = []
    stop, burst_done = threading.Event(), threading.Event()
    started = time.perf_counter()
    samples.append((0.0, first))

    def sample() -> None:
        try:
            while not stop.wait(SAMPLE_IDLE_S if burst_done.is_set() else SAMPLE_BURST_S):
                samples.append((time.perf_counter() - started, count()))
            samples.append((time.perf_counter() - started, count()))
        except BaseException as exc:  # re-raised in the measure below
            failures.append(exc)

    sampler = threading.Thread(target=sample, name="bench-replica-sampler", daemon=True)
    sampler.start()
    try:
        await burst()
        wall = time.perf_counter() - started
        burst_done.set()
        await asyncio.sleep(max(0.0, window_s - (time.perf_counter() - started)))
    finally:
        stop.set()
        await asyncio.to_thread(sampler.join)
    if failures:
        raise failures[0]
    return ArmRound(wall_s=wall, samples=samples)


async def until(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``predicate`` (in a thread: it asks Ray) every 100 ms; seconds it took. Raises
    ``TimeoutError`` naming ``what`` after ``timeout_s``."""
    started = time.perf_counter()
    while not await asyncio.to_thread(predicate):
        if time.perf_counter() - started > timeout_s:
            raise TimeoutError(f"{NAME}: {what} did not happen within {timeout_s:g} s")
        await asyncio.sleep(0.1)
    return time.perf_counter() - started


# ------------------------------------------------------------------ soloist's arms


async def _sleep(inp: SleepIn) -> SleepOut:
    await asyncio.sleep(inp.seconds)
    return SleepOut(slept=inp.seconds)


def make_registry(max_replicas: int, downscale_delay_s: float | None) -> tuple[SkillRegistry, PoolPolicy]:
    """One registry, two skills running the same sleep: ``sleep_autoscaled`` (from 1 replica)
    and ``sleep_fixed`` (``max_replicas`` kept). The same runs hand off to both."""
    auto = PoolPolicy(min_replicas=1, max_replicas=max_replicas,
                      **({} if downscale_delay_s is None else {"downscale_delay_s": downscale_delay_s}))
    skills = SkillRegistry(policy=auto)
    skills.register("sleep_autoscaled", _sleep)
    skills.register("sleep_fixed", _sleep, policy=PoolPolicy(min_replicas=max_replicas, max_replicas=max_replicas))
    return skills, auto


def replicas_of(pool_name: str) -> Callable[[], int]:
    prefix = f"{pool_name}:"
    return lambda: sum(1 for name in live_replica_names() if name.startswith(prefix))


async def handoff_burst(runs: list[Orchestrator[Counter]], skill: str, calls_per_run: int, sleep_s: float) -> None:
    calls = [Call(skill, SleepIn(seconds=sleep_s))] * calls_per_run
    batches = await asyncio.gather(*[parallel_handoff(o, calls, SleepOut) for o in runs])
    failed = [r.error for b in batches for r in b if r.error is not None]
    if failed:
        raise RuntimeError(f"{len(failed)} handoffs of {skill} failed, first: {failed[0]!r}")


# ------------------------------------------------------------------ Ray Serve's arm


class _QueueProbeWarnings(logging.Filter):
    """Counts (and keeps off the console) Serve's "Failed to get queue length" warnings."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if _QUEUE_PROBE_WARNING in record.getMessage():
            self.count += 1
            return False
        return True


class ServeArm:
    """A Ray Serve app of one autoscaling deployment running the same sleep, and its replicas."""

    def __init__(self, max_replicas: int) -> None:
        from ray import serve  # optional: the caller checked it imports

        self._serve = serve
        self.max_replicas = max_replicas
        self.redeploys = 0
        self.handle: Any = None
        self.warnings = _QueueProbeWarnings()
        logging.getLogger("ray.serve").addFilter(self.warnings)

        @serve.deployment(autoscaling_config={"min_replicas": 1, "max_replicas": max_replicas},
                          ray_actor_options={"num_cpus": 0})
        class SleepDeployment:
            async def __call__(self, inp: SleepIn) -> SleepOut:
                await asyncio.sleep(inp.seconds)
                return SleepOut(slept=inp.seconds)

        self._deployment = SleepDeployment
        self._app = SleepDeployment.bind()

    def count(self) -> int:
        return sum(1 for entry in ray.util.list_named_actors(all_namespaces=True)
                   if entry.get("namespace") == _SERVE_NAMESPACE and entry["name"].startswith(_SERVE_PREFIX))

    def settings(self) -> str:
        """The deployment's autoscaling settings as Serve holds them (its defaults filled in)."""
        from ray.serve.config import AutoscalingConfig

        cfg = AutoscalingConfig(min_replicas=1, max_replicas=self.max_replicas)
        return (f"target_ongoing_requests {cfg.target_ongoing_requests:g}, upscale_delay_s {cfg.upscale_delay_s:g}, "
                f"downscale_delay_s {cfg.downscale_delay_s:g}, look_back_period_s {cfg.look_back_period_s:g}, "
                f"max_ongoing_requests {self._deployment.max_ongoing_requests}")

    async def deploy(self) -> None:
        def start() -> Any:
            self._serve.start(proxy_location="Disabled")  # handles only: no HTTP port taken
            return self._serve.run(self._app, name=_SERVE_APP, route_prefix=None)

        self.handle = await asyncio.to_thread(start)
        await until(lambda: self.count() == 1, 60.0, "Serve's app at 1 replica")
        await asyncio.gather(*[self.handle.remote(SleepIn(seconds=0.0)) for _ in range(CAP)])

    async def reset(self) -> None:
        """Back at 1 replica: its ``downscale_delay_s`` (600 s) would carry a round's replicas
        into the next, so a round that starts with more deploys the app again."""
        if self.count() == 1:
            return
        self.redeploys += 1
        await asyncio.to_thread(self._serve.delete, _SERVE_APP)
        await until(lambda: self.count() == 0, 120.0, "Serve's replicas gone")
        await self.deploy()

    async def burst(self, runs: int, calls_per_run: int, sleep_s: float) -> None:
        async def one_run() -> None:
            cap = asyncio.Semaphore(CAP)

            async def one() -> None:
                async with cap:
                    await self.handle.remote(SleepIn(seconds=sleep_s))

            await asyncio.gather(*[one() for _ in range(calls_per_run)])

        await asyncio.gather(*[one_run() for _ in range(runs)])

    async def close(self) -> None:
        try:
            await asyncio.to_thread(self._serve.shutdown)
        finally:
            logging.getLogger("ray.serve").removeFilter(self.warnings)


def serve_missing() -> str | None:
    """Why Ray Serve cannot run here, or None."""
    try:
        import ray.serve  # noqa: F401
    except Exception as exc:  # ImportError, or a missing dependency of it (grpc, say)
        return f"Ray Serve is not importable ({type(exc).__name__}: {exc}); pip install 'soloist[bench]'"
    return None


# ------------------------------------------------------------------ the measure


def _kill_replicas(prefix: str) -> None:
    """End a pool's replicas (its fixed ones never retire), so they outlive no measure."""
    for name in live_replica_names():
        if name.startswith(prefix):
            try:
                ray.kill(ray.get_actor(name, namespace=SOLOIST_NAMESPACE), no_restart=True)
            except ValueError:  # retired meanwhile
                pass


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def _secs(values: list[float | None]) -> str:
    return ", ".join("none" if v is None else f"{v:.2f}" for v in values)


@dataclass
class _Rounds:
    by_arm: dict[str, list[ArmRound]] = field(default_factory=lambda: {arm: [] for arm in ARMS})
    auto_grown: list[int] = field(default_factory=list)
    auto_waits: list[float] = field(default_factory=list)


async def run(ctx: BenchContext) -> MeasureResult:
    cfg = ctx.config
    n_runs, per_run, sleep_s, top, window = (cfg.pool_runs, cfg.pool_calls_per_run, cfg.pool_sleep_s,
                                             cfg.pool_max_replicas, cfg.pool_window_s)
    missing = serve_missing()
    arms = [a for a in ARMS if a != SERVE or missing is None]
    ctx.step(f"starting {n_runs} runs and a fixed pool of {top} replicas")
    skills, auto_policy = make_registry(top, cfg.pool_downscale_delay_s)
    runs = await start_runs(*[lambda i=i: Orchestrator(Counter(), caller=skills, name=run_name(f"burst{i}"))
                              for i in range(n_runs)])
    auto_pool, fixed_pool = pool_for(skills, "sleep_autoscaled"), pool_for(skills, "sleep_fixed")
    auto_count, fixed_count = replicas_of(auto_pool.name), replicas_of(fixed_pool.name)
    serve_arm: ServeArm | None = None
    rounds = _Rounds()
    try:
        await asyncio.to_thread(fixed_pool.handles)
        await until(lambda: fixed_pool.statistics().ready == top, 300.0, f"the fixed pool's {top} replicas started")
        await until(lambda: auto_pool.statistics().ready >= 1, 120.0, "the autoscaled pool's first replica started")
        ctx.step("warming each run's semaphore and both pools")
        # Each run's semaphore starts at its first handoff (not the pools' cost); one call at a
        # time on the autoscaled pool, so it stays at 1 replica; one untimed burst on the fixed.
        await asyncio.gather(*[parallel_handoff(o, [Call("sleep_fixed", SleepIn(seconds=0.0))], SleepOut) for o in runs])
        for o in runs:
            await handoff_burst([o], "sleep_autoscaled", 1, 0.0)
        await handoff_burst(runs, "sleep_fixed", per_run, sleep_s)
        if missing is None:
            ctx.step("starting Ray Serve's app")
            serve_arm = ServeArm(top)
            await serve_arm.deploy()
        back_at_min = 3 * (auto_policy.downscale_delay_s + 2.0) + 30.0
        for r in range(cfg.pool_rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            ctx.step(f"round {r + 1} of {cfg.pool_rounds}: {', '.join(order)} ({window:g} s window each)")
            for arm in order:
                if arm == AUTO:
                    rounds.auto_waits.append(await until(lambda: auto_count() == auto_policy.min_replicas, back_at_min,
                                                          "the autoscaled pool back at min_replicas"))
                    grown = auto_pool.statistics().grown
                    rounds.by_arm[AUTO].append(await observe(
                        lambda: handoff_burst(runs, "sleep_autoscaled", per_run, sleep_s), auto_count, window))
                    rounds.auto_grown.append(auto_pool.statistics().grown - grown)
                elif arm == FIXED:
                    rounds.by_arm[FIXED].append(await observe(
                        lambda: handoff_burst(runs, "sleep_fixed", per_run, sleep_s), fixed_count, window))
                else:
                    assert serve_arm is not None
                    await serve_arm.reset()
                    rounds.by_arm[SERVE].append(await observe(
                        lambda: serve_arm.burst(n_runs, per_run, sleep_s), serve_arm.count, window))
    finally:
        for o in runs:
            await close_run(o)
        if serve_arm is not None:
            await serve_arm.close()
        await asyncio.to_thread(_kill_replicas, f"{fixed_pool.name}:")
        await asyncio.to_thread(_kill_replicas, f"{auto_pool.name}:")
    return _result(cfg, rounds, auto_policy, serve_arm, missing)


def _result(cfg: Any, rounds: _Rounds, auto_policy: PoolPolicy, serve_arm: ServeArm | None, missing: str | None) -> MeasureResult:
    auto, fixed, srv = rounds.by_arm[AUTO], rounds.by_arm[FIXED], rounds.by_arm[SERVE]
    top, calls = cfg.pool_max_replicas, cfg.pool_runs * cfg.pool_calls_per_run
    params: dict[str, float | int | str] = {
        "runs": cfg.pool_runs, "calls": calls, "sleep_s": cfg.pool_sleep_s, "cap_per_run": CAP,
        "max_replicas": top, "window_s": cfg.pool_window_s,
        "downscale_delay_s": auto_policy.downscale_delay_s, "target_ongoing_calls": auto_policy.target_ongoing_calls,
    }
    figures = [
        Figure(measure=NAME, name="burst wall time, autoscaled vs fixed pool", values=[a.wall_s for a in auto],
               baselines=[f.wall_s for f in fixed], baseline_name=f"fixed pool of {top} started ahead, same rounds",
               unit="s", better="lower", target=WALL_TARGET, params=params),
        Figure(measure=NAME, name="replica-seconds over the burst-then-idle window, autoscaled vs fixed pool",
               values=[a.replica_seconds for a in auto], baselines=[f.replica_seconds for f in fixed],
               baseline_name=f"fixed pool of {top} (Ray's actor table, same window)", unit="replica-s",
               better="lower", target=COST_TARGET, params=params),
    ]
    if srv:
        figures += [
            Figure(measure=NAME, name="burst wall time, autoscaled vs Ray Serve defaults", values=[a.wall_s for a in auto],
                   baselines=[s.wall_s for s in srv], baseline_name="Ray Serve autoscaling, documented defaults, same rounds",
                   unit="s", better="lower", target=SERVE_TARGET, params=params),
            Figure(measure=NAME, name="replica-seconds over the window, autoscaled vs Ray Serve defaults",
                   values=[a.replica_seconds for a in auto], baselines=[s.replica_seconds for s in srv],
                   baseline_name="Ray Serve autoscaling (Ray's actor table, same window)", unit="replica-s",
                   better="lower", params=params),
        ]
    ideal = -(-cfg.pool_calls_per_run // CAP) * cfg.pool_sleep_s
    auto_up = [a.first_scale_up_s() for a in auto]
    notes = [
        f"{cfg.pool_runs} runs x {cfg.pool_calls_per_run} calls of {cfg.pool_sleep_s:g} s at cap {CAP} ({calls} calls, "
        f"ideal {ideal:g} s); window {cfg.pool_window_s:g} s per arm from the burst's start; autoscaled "
        f"PoolPolicy(min_replicas=1, max_replicas={top}, target_ongoing_calls={auto_policy.target_ongoing_calls:g}, "
        f"upscale_delay_s={auto_policy.upscale_delay_s:g}, downscale_delay_s={auto_policy.downscale_delay_s:g})"
        + ("" if cfg.pool_downscale_delay_s is None else " (downscale delay shortened to fit the window)"),
        f"time to first scale-up (burst start to a second replica in Ray's table), autoscaled: median "
        f"{_fmt_opt(_med([t for t in auto_up if t is not None]))} s, rounds {_secs(auto_up)}; "
        f"replicas peak {[a.peak for a in auto]}, at window end {[a.end for a in auto]}, grown {rounds.auto_grown}; "
        f"waited {_secs(list(rounds.auto_waits))} s before each round for the pool to be back at 1",
        f"burst wall (median): autoscaled {_med([a.wall_s for a in auto]):.2f} s, fixed {_med([f.wall_s for f in fixed]):.2f} s"
        + (f", Serve {_med([s.wall_s for s in srv]):.2f} s" if srv else "")
        + f"; replica-seconds (median): autoscaled {_med([a.replica_seconds for a in auto]):.1f}, fixed "
        f"{_med([f.replica_seconds for f in fixed]):.1f} (nominal {top} x window = {top * cfg.pool_window_s:g})"
        + (f", Serve {_med([s.replica_seconds for s in srv]):.1f}" if srv else ""),
    ]
    if any(a.end > auto_policy.min_replicas for a in auto):
        notes.append("the autoscaled pool was not back at min_replicas at a window's end: its replica-seconds "
                     "leave out the rest of its shrinking (understated)")
    if serve_arm is not None and srv:
        serve_up = [s.first_scale_up_s() for s in srv]
        notes.append(
            f"Ray Serve ({serve_arm.settings()}; num_cpus 0 per replica): time to first scale-up "
            + ("none within the window in any round" if all(t is None for t in serve_up)
               else f"median {_fmt_opt(_med([t for t in serve_up if t is not None]))} s")
            + f", rounds {_secs(serve_up)}; replicas at start {[s.start for s in srv]}, peak {[s.peak for s in srv]}, "
            f"at window end {[s.end for s in srv]}; redeployed {serve_arm.redeploys} time(s) to start a round at 1 "
            f"replica; {serve_arm.warnings.count} 'Failed to get queue length' warnings from its router")
    else:
        notes.append(f"Ray Serve arm skipped: {missing}")
    notes.append(_goals(figures))
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)


def _fmt_opt(value: float) -> str:
    return "none" if not math.isfinite(value) else f"{value:.2f}"


def _goals(figures: list[Figure]) -> str:
    """Each goal of issue 28, met or missed, with its median and spread (a miss is never hidden)."""
    parts = []
    for f, goal in zip(figures, ("wall <= 1.25 x fixed", "replica-seconds <= 0.5 x fixed", "faster than Serve", None)):
        if goal is not None and f.target is not None:
            parts.append(f"{goal}: {'MISSED' if f.poor else 'met'} ({fmt_ratio(f.ratio)}, spread {f.spread()})")
    if len(figures) < 3:
        parts.append("faster than Serve: not measured (Serve skipped)")
    return "goals (issue 28): " + "; ".join(parts)
