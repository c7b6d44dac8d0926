"""(12) Many runs on one machine (issue 29): thousands of durable runs on a few host processes.

``many_runs`` durable runs (10,000 in full) share one SQLite store. Each takes 3 writes and one
handoff (a no-op skill, under its own cap of 4); then all but a tenth of them wait (nobody calls
them, as a run waiting for an approval) while the rest stay active. Measured from outside:

- **run starts/s**: runs started with ``await Orchestrator.open`` from one event loop, 1,024 at a time,
  divided by the wall time; and, on a tenth as many runs closed again at once, the synchronous
  constructor called from 64 threads;
- **resident memory**: ``VmRSS`` of every Ray worker process of the session (``/proc``), summed,
  with every run loaded and once the waiting runs were unloaded (their hosts report it), divided
  by the runs (open) and by the waiting runs: upper bounds, since the sums hold every fixed
  process too (hosts, semaphore services, replicas, the metrics collector) and the active tenth;
- **actor processes**: live ``ray::`` worker processes (not idle ones), before and after;
- **apply throughput**: every active run applying at once, summed, against one run alone
  doing the same number of applies with the same concurrency, and against raw async actors
  (as many as there are hosts) taking the same calls with the same payload: the ceiling of
  that many processes;
- **latency on a busy host**: a run on a host holding the other runs, against a
  ``dedicated=True`` run in the same session: median ``apply`` and ``handoff`` latency, rounds
  alternating between the two;
- **runs waiting for an approval** (issue 43; ``many_waiting_runs``, 100,000 in full): durable
  runs in a store of their own, each taking 2 writes, a handoff and a third write that opens
  an interrupt, then nobody calls them until their hosts unload them. Resident memory per
  waiting run is the Ray workers' summed RSS while they wait minus the same sum before the
  first of them, divided by the waiting runs (the goal: 20 KB); measured after the first tenth
  too, which splits it into a fixed part and a part per run. Then ``many_waiting_answers`` of
  them, picked at random, are answered: each must come back at the version it had, with its
  interrupt open, and record the answer as the next version.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray

from actors import (
    RUN_RECORD_KEY,
    Call,
    Interrupt,
    Orchestrator,
    RunRecord,
    answer_interrupt,
    handoff,
    host_statistics,
    read_record,
    run_host_name,
)
from benchmarks._harness import BenchContext, Counter, NoopIn, NoopOut, RawCounter, bump, run_name
from benchmarks.results import Figure, MeasureResult
from coordinators import AgentState, TransitionBatch

NAME = "many_runs"
TITLE = "Many durable runs on one machine: starts/s, memory per run, processes, summed applies, latency on a busy host"
STARTS_TARGET = 500.0  # run starts per second
WAITING_MB_TARGET = 1.0  # resident MB per waiting run
WAITING_KB_TARGET = 20.0  # resident KB per run waiting for an approval, unloaded (issue 43)
CEILING_TARGET = 0.8  # summed applies against the raw async-actor ceiling of as many processes
LATENCY_TARGET = 1.2  # a hosted run's latency against a dedicated run's
_START_THREADS = 64
_OPEN_AT_ONCE = 1024
_MB = 1024 * 1024
_KB = 1024
_ANSWER_AT_ONCE = 64
_WAITING_VERSION = 3  # two writes, a handoff (it writes nothing), then the write opening the interrupt


def steps(ctx: BenchContext) -> int:
    return 15 + ctx.config.rounds


# ------------------------------------------------------------ outside readings


def _cmdline(pid: str) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode("utf-8", "replace") for part in f.read().split(b"\0")]
    except OSError:
        return []


def _parent(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("PPid:"))
    except (OSError, StopIteration):
        return 0


def _ray_workers() -> list[tuple[int, str]]:
    """``(pid, title)`` of every worker process of this Ray session on this machine: the
    ``ray::`` processes whose parent is a raylet of this session's GCS (other Ray sessions on
    the machine are not counted)."""
    gcs = f"--gcs-address={ray.get_runtime_context().gcs_address}"
    pids = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    raylets = {int(pid) for pid in pids if gcs in (args := _cmdline(pid)) and args[0].endswith("raylet")}
    found = []
    for pid in pids:
        title = (_cmdline(pid) or [""])[0]
        if title.startswith("ray::") and _parent(pid) in raylets:
            found.append((int(pid), title))
    return found


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return 0  # it exited between the listing and the read
    return 0


def workers_rss() -> int:
    """Resident bytes of every Ray worker process, summed."""
    return sum(_rss_bytes(pid) for pid, _ in _ray_workers())


def actor_processes() -> int:
    """Ray worker processes that hold an actor (idle pooled workers are not counted)."""
    return sum(1 for _, title in _ray_workers() if not title.startswith("ray::IDLE"))


def gcs_rss() -> int:
    """Resident bytes of this session's GCS server (where Ray keeps its tables and key-value
    store: what runs keep outside the workers); 0 if it is not on this machine."""
    gcs = f"--gcs-address={ray.get_runtime_context().gcs_address}"
    pids = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    sessions = {arg.split("=", 1)[1] for pid in pids if gcs in (args := _cmdline(pid)) and args[0].endswith("raylet")
                for part in args if part.startswith("--python_worker_command=")
                for arg in part.split() if arg.startswith("--session-name=")}
    return sum(_rss_bytes(int(pid)) for pid in pids
               if (args := _cmdline(pid)) and args[0].endswith("gcs_server")
               and any(session in arg for session in sessions for arg in args if arg.startswith("--log_dir=")))


def _files_under(directory: str) -> int:
    return sum(len(files) for _, _, files in os.walk(directory))


# --------------------------------------------------------------------- workloads


async def _open_all(count: int, open_one: Any) -> tuple[list[Any], float]:
    """``count`` runs from ``open_one(i)`` (a coroutine), ``_OPEN_AT_ONCE`` at a time; the wall time."""
    started = time.perf_counter()
    runs = await _bounded([open_one(i) for i in range(count)], _OPEN_AT_ONCE)
    return list(runs), time.perf_counter() - started


async def _start_all(count: int, make: Any) -> tuple[list[Orchestrator[Counter]], float]:
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=_START_THREADS, thread_name_prefix="bench-start") as pool:
        runs = await asyncio.gather(*(loop.run_in_executor(pool, make, i) for i in range(count)))
    return list(runs), time.perf_counter() - started


async def _bounded(coros: list[Any], limit: int) -> list[Any]:
    gate = asyncio.Semaphore(limit)

    async def one(coro: Any) -> Any:
        async with gate:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


async def _first_work(orch: Orchestrator[Counter]) -> None:
    for _ in range(3):
        await orch.apply(bump)
    await handoff(orch, Call("noop", NoopIn()), NoopOut)


async def _summed_applies(runs: list[Orchestrator[Counter]], per_run: int) -> float:
    """Applies per second of every run in ``runs`` applying ``per_run`` times at once."""
    async def writer(orch: Orchestrator[Counter]) -> None:
        for _ in range(per_run):
            await orch.apply(bump)

    started = time.perf_counter()
    await asyncio.gather(*(writer(o) for o in runs))
    return len(runs) * per_run / (time.perf_counter() - started)


async def _one_run_applies(orch: Orchestrator[Counter], total: int, concurrency: int) -> float:
    """Applies per second of one run taking ``total`` applies from ``concurrency`` writers."""
    async def writer(n: int) -> None:
        for _ in range(n):
            await orch.apply(bump)

    share = [total // concurrency + (1 if i < total % concurrency else 0) for i in range(concurrency)]
    started = time.perf_counter()
    await asyncio.gather(*(writer(n) for n in share))
    return total / (time.perf_counter() - started)


async def _raw_applies(actors: list[Any], total: int, concurrency: int) -> float:
    """The raw ceiling: ``total`` apply-shaped calls (token, request id, ``bump``) spread over
    plain async actors, from ``concurrency`` writers."""
    async def writer(i: int, n: int) -> None:
        actor = actors[i % len(actors)]
        for k in range(n):
            await actor.apply_fn.remote("token", f"{i}-{k}", bump)

    share = [total // concurrency + (1 if i < total % concurrency else 0) for i in range(concurrency)]
    started = time.perf_counter()
    await asyncio.gather(*(writer(i, n) for i, n in enumerate(share)))
    return total / (time.perf_counter() - started)


async def _latencies(orch: Orchestrator[Counter], calls: int) -> tuple[float, float]:
    """Median seconds of one ``apply`` and of one ``handoff``, each called ``calls`` times in turn."""
    applies, handoffs = [], []
    for _ in range(calls):
        started = time.perf_counter()
        await orch.apply(bump)
        applies.append(time.perf_counter() - started)
        started = time.perf_counter()
        await handoff(orch, Call("noop", NoopIn()), NoopOut)
        handoffs.append(time.perf_counter() - started)
    return statistics.median(applies), statistics.median(handoffs)


async def _until_unloaded(expected: int, timeout_s: float) -> float:
    """Seconds until the hosts report at least ``expected`` unloaded runs."""
    started = time.perf_counter()
    while sum(s.unloaded for s in await asyncio.to_thread(host_statistics)) < expected:
        if time.perf_counter() - started > timeout_s:
            raise TimeoutError(f"{NAME}: {expected} waiting runs were not unloaded within {timeout_s:g} s")
        await asyncio.sleep(0.5)
    return time.perf_counter() - started


async def _waiting_work(orch: Orchestrator[AgentState], i: int) -> None:
    """Two writes, a handoff, and the write that opens the run's interrupt (as a coordinator
    asking for approval leaves it): from then on the run waits for a person."""
    await orch.apply_batch(TransitionBatch().update_state("topic", f"question {i}"))
    await orch.apply_batch(TransitionBatch().update_state("draft", f"an answer to question {i}, to be approved"))
    await handoff(orch, Call("noop", NoopIn()), NoopOut)
    asked = Interrupt(id=f"{orch.name}/i1", kind="turn", question={"publish": i}, coordinator="writer", turn=1,
                      opened_version=_WAITING_VERSION)
    record = RunRecord(status="waiting", turn=1, interrupts={asked.id: asked}, opened=1)
    version = await orch.apply_batch(TransitionBatch().update_state(RUN_RECORD_KEY, record.model_dump(mode="json")))
    if version != _WAITING_VERSION:
        raise RuntimeError(f"{NAME}: run {orch.name} opened its interrupt at version {version}, not {_WAITING_VERSION}")


async def _answer(orch: Orchestrator[AgentState]) -> float:
    """Seconds to answer the run's interrupt, reading it first (the run is activated again
    from its store); raises if the run did not come back as it was left."""
    started = time.perf_counter()
    version, state = await orch.versioned_snapshot()
    record = read_record(state)
    open_ids = [i.id for i in record.open_interrupts()] if record is not None else []
    if version != _WAITING_VERSION or open_ids != [f"{orch.name}/i1"]:
        raise RuntimeError(f"{NAME}: run {orch.name} came back at version {version} with open interrupts {open_ids}, "
                           f"not at version {_WAITING_VERSION} with its one interrupt")
    answered = await answer_interrupt(orch, open_ids[0], approve=True)
    if answered != _WAITING_VERSION + 1:
        raise RuntimeError(f"{NAME}: run {orch.name} recorded its answer as version {answered}")
    return time.perf_counter() - started


async def _waiting_row(ctx: BenchContext, directory: str) -> tuple[list[Figure], list[str]]:
    """The runs waiting for an approval (see the module's docstring): figures and notes."""
    cfg = ctx.config
    count, answers = cfg.many_waiting_runs, min(cfg.many_waiting_answers, cfg.many_waiting_runs)
    first = max(1, count // 10)
    store = os.path.join(directory, "waiting.sqlite")
    prefix = run_name("waiting")
    rss_before, gcs_before, processes_before = workers_rss(), gcs_rss(), actor_processes()
    runs: list[Orchestrator[AgentState]] = []
    start_wall = 0.0
    rss_first = 0
    try:
        for part, (low, high) in enumerate(((0, first), (first, count))):
            ctx.step(f"waiting runs: starting runs {low:,} to {high:,} with Orchestrator.open, {_OPEN_AT_ONCE} at a time")
            opened, wall = await _open_all(high - low, lambda i, low=low: Orchestrator.open(
                AgentState(), caller=ctx.skills, name=f"{prefix}-{low + i}", store=store,
                unload_after_s=cfg.many_waiting_unload_after_s))
            runs += opened
            start_wall += wall
            ctx.step(f"waiting runs: 2 writes, a handoff and an interrupt in each of {len(opened):,} runs")
            await _bounded([_waiting_work(o, low + i) for i, o in enumerate(opened)], 512)
            ctx.step(f"waiting runs: {high:,} runs wait; the hosts unload them")
            await _until_unloaded(high, 600 + high / 10)
            gc.collect()
            if part == 0:
                rss_first = workers_rss()
        rss_waiting, gcs_waiting, processes_waiting = workers_rss(), gcs_rss(), actor_processes()
        locks = _files_under(directory)
        activations_before = sum(s.activations for s in await asyncio.to_thread(host_statistics))
        ctx.step(f"waiting runs: answering {answers:,} of them, picked at random")
        picked = random.Random(43).sample(runs, answers)
        latencies = await _bounded([_answer(o) for o in picked], _ANSWER_AT_ONCE)
        host_stats = await asyncio.to_thread(host_statistics)
        activations = sum(s.activations for s in host_stats) - activations_before
    finally:
        ctx.step(f"waiting runs: closing {len(runs):,} runs")
        await _bounded([o.close() for o in runs], 512)
    per_run = (rss_waiting - rss_before) / count
    marginal = (rss_waiting - rss_first) / max(1, count - first)
    fixed = rss_waiting - rss_before - marginal * count
    params: dict[str, float | int | str] = {"runs": count, "hosts": len(host_stats), "store": "sqlite, sync",
                                            "unload_after_s": cfg.many_waiting_unload_after_s}
    figures = [
        Figure(measure=NAME, name="resident memory per run waiting for an approval", values=[per_run / _KB],
               baselines=[WAITING_KB_TARGET], baseline_name="the goal: 20 KB per waiting run", unit="KB/run",
               better="lower", target=1.0, params=params),
        Figure(measure=NAME, name="run starts, runs that will wait", values=[count / start_wall], baselines=[STARTS_TARGET],
               baseline_name="the goal: 500 starts/s", unit="starts/s", better="higher", target=1.0,
               params={**params, "how": f"Orchestrator.open, {_OPEN_AT_ONCE} at a time"}),
        Figure(measure=NAME, name="actor processes while the runs wait", values=[float(processes_waiting)],
               baselines=[float(count)], baseline_name="one process per run", unit="processes", better="lower",
               params={**params, "before": processes_before}),
    ]
    notes = [
        f"{count:,} runs waiting for an approval: Ray worker RSS {rss_before / _MB:,.0f} MB before the first, "
        f"{rss_first / _MB:,.0f} MB with the first {first:,} waiting, {rss_waiting / _MB:,.0f} MB with all waiting: "
        f"{per_run / _KB:,.1f} KB per waiting run, of which a fixed {fixed / _MB:,.0f} MB (processes started, caches "
        f"filled) and {marginal / _KB:,.1f} KB per run",
        f"the GCS server (outside the workers, where hosts record the runs their drivers' exits close): "
        f"{gcs_before / _MB:,.0f} MB before, {gcs_waiting / _MB:,.0f} MB while {count:,} runs wait",
        f"{answers:,} waiting runs picked at random and answered, {_ANSWER_AT_ONCE} at a time: each came back at version "
        f"{_WAITING_VERSION} with its interrupt open and recorded the answer as version {_WAITING_VERSION + 1}; "
        f"{activations:,} activations; read and answered in {statistics.median(latencies) * 1000:,.0f} ms (median), "
        f"{max(latencies) * 1000:,.0f} ms at most",
        f"files beside the stores while {count:,} runs wait: {locks:,}; actor processes {processes_before} before, "
        f"{processes_waiting} while waiting",
    ]
    return figures, notes


# ------------------------------------------------------------------------ measure


async def run(ctx: BenchContext) -> MeasureResult:
    # Its stores go with it; a failure to remove them never hides the measure's own error.
    with tempfile.TemporaryDirectory(prefix="soloist-bench-many-", ignore_cleanup_errors=True) as directory:
        return await _measure(ctx, directory)


async def _measure(ctx: BenchContext, directory: str) -> MeasureResult:
    cfg = ctx.config
    count, active_count = cfg.many_runs, max(1, cfg.many_runs // 10)
    waiting_count = count - active_count
    skills = ctx.skills
    store = os.path.join(directory, "runs.sqlite")
    prefix = run_name("many")
    processes_before, rss_before = actor_processes(), workers_rss()
    dedicated = await asyncio.to_thread(lambda: Orchestrator(Counter(), caller=skills, name=f"{prefix}-dedicated",
                                                             store=store, dedicated=True))
    runs: list[Orchestrator[Counter]] = []
    try:
        threaded_count = max(1, count // 10)
        ctx.step(f"starting {threaded_count:,} durable runs with the constructor from {_START_THREADS} threads")
        threaded, threaded_wall = await _start_all(threaded_count, lambda i: Orchestrator(
            Counter(), caller=skills, name=f"{prefix}-t{i}", store=store, unload_after_s=3_600.0))
        await _bounded([o.close() for o in threaded], 512)
        ctx.step(f"starting {count:,} durable runs with Orchestrator.open, {_OPEN_AT_ONCE} at a time")

        def open_one(i: int) -> Any:
            unload = cfg.many_unload_after_s if i >= active_count else 3_600.0
            return Orchestrator.open(Counter(), caller=skills, name=f"{prefix}-{i}", store=store, unload_after_s=unload)

        runs, start_wall = await _open_all(count, open_one)
        ctx.step(f"3 writes and a handoff in each of {count:,} runs")
        await _bounded([_first_work(o) for o in runs], 512)
        rss_open, processes_open = workers_rss(), actor_processes()
        active = runs[:active_count]  # the rest wait

        ctx.step(f"{waiting_count:,} runs wait; the hosts unload them")
        keep_busy = asyncio.Event()

        async def keep_active() -> None:  # the active tenth stays in memory
            while not keep_busy.is_set():
                await _bounded([o.version() for o in active], 256)
                await asyncio.sleep(min(1.0, cfg.many_unload_after_s / 2))

        busy = asyncio.ensure_future(keep_active())
        unload_wait = await _until_unloaded(waiting_count, 600 + count / 10)
        rss_waiting, processes_waiting = workers_rss(), actor_processes()
        keep_busy.set()
        await busy

        ctx.step("summed applies of the active runs vs one run alone vs raw actors")
        hosts = len({run_host_name(o.name, store=store) for o in runs})
        raw = [RawCounter.remote() for _ in range(hosts)]  # type: ignore[attr-defined]
        await asyncio.gather(*(r.apply_fn.remote("t", "warm", bump) for r in raw))
        per_run = cfg.many_applies_per_run
        total = len(active) * per_run
        summed, alone, ceiling = [], [], []
        for r in range(cfg.rounds):
            ctx.step(f"round {r + 1} of {cfg.rounds}: summed, alone, raw")
            order = [0, 1, 2] if r % 2 == 0 else [2, 1, 0]
            for arm in order:
                if arm == 0:
                    summed.append(await _summed_applies(active, per_run))
                elif arm == 1:
                    alone.append(await _one_run_applies(active[0], total, len(active)))
                else:
                    ceiling.append(await _raw_applies(raw, total, len(active)))

        ctx.step("latency: a run on a busy host vs a dedicated run")
        hosted_apply, hosted_handoff, own_apply, own_handoff = [], [], [], []
        for r in range(cfg.rounds):
            pairs = [(active[0], hosted_apply, hosted_handoff), (dedicated, own_apply, own_handoff)]
            for orch, applies, handoffs in (pairs if r % 2 == 0 else pairs[::-1]):
                a, h = await _latencies(orch, cfg.many_latency_calls)
                applies.append(a)
                handoffs.append(h)
        host_stats = await asyncio.to_thread(host_statistics)
    finally:
        ctx.step(f"closing {len(runs):,} runs")
        await _bounded([o.close() for o in runs], 512)
        await dedicated.close()
    waiting_figures, waiting_notes = await _waiting_row(ctx, directory)

    params: dict[str, float | int | str] = {"runs": count, "active": active_count, "waiting": waiting_count,
                                            "hosts": len(host_stats), "store": "sqlite, sync"}
    figures = [
        Figure(measure=NAME, name="run starts", values=[count / start_wall], baselines=[STARTS_TARGET],
               baseline_name="the goal: 500 starts/s", unit="starts/s", better="higher", target=1.0,
               params={**params, "how": f"Orchestrator.open, {_OPEN_AT_ONCE} at a time"}),
        Figure(measure=NAME, name="run starts, constructor from threads", values=[threaded_count / threaded_wall],
               baselines=[STARTS_TARGET], baseline_name="500 starts/s", unit="starts/s", better="higher",
               params={**params, "runs": threaded_count, "how": f"Orchestrator(...) from {_START_THREADS} threads"}),
        Figure(measure=NAME, name="resident memory per open run", values=[rss_open / count / _MB],
               baselines=[WAITING_MB_TARGET], baseline_name="1 MB", unit="MB/run", better="lower", params=params),
        Figure(measure=NAME, name="resident memory per waiting run", values=[rss_waiting / waiting_count / _MB],
               baselines=[WAITING_MB_TARGET], baseline_name="the goal: 1 MB per waiting run", unit="MB/run",
               better="lower", target=1.0, params=params),
        Figure(measure=NAME, name="actor processes while every run is open", values=[float(processes_open)],
               baselines=[float(count)], baseline_name="one process per run", unit="processes", better="lower",
               params={**params, "before": processes_before, "while_waiting": processes_waiting}),
        Figure(measure=NAME, name="summed applies of the active runs", values=summed, baselines=ceiling,
               baseline_name=f"{hosts} raw async actors, same calls and concurrency", unit="applies/s", better="higher",
               target=CEILING_TARGET, params={**params, "applies_per_run": per_run}),
        Figure(measure=NAME, name="summed applies vs one run alone", values=summed, baselines=alone,
               baseline_name="one run, same applies and concurrency", unit="applies/s", better="higher", params=params),
        Figure(measure=NAME, name="apply latency on a busy host", values=hosted_apply, baselines=own_apply,
               baseline_name="a dedicated=True run", unit="s", better="lower", target=LATENCY_TARGET, params=params),
        Figure(measure=NAME, name="handoff latency on a busy host", values=hosted_handoff, baselines=own_handoff,
               baseline_name="a dedicated=True run", unit="s", better="lower", target=LATENCY_TARGET, params=params),
    ]
    notes = [
        f"{count:,} runs started in {start_wall:.1f} s with Orchestrator.open ({threaded_count:,} with the constructor "
        f"from {_START_THREADS} threads in {threaded_wall:.1f} s); {waiting_count:,} waiting runs unloaded {unload_wait:.1f} s after "
        f"the unload delay began ({cfg.many_unload_after_s:g} s idle)",
        f"Ray worker RSS: {rss_before / _MB:,.0f} MB before, {rss_open / _MB:,.0f} MB with every run open, "
        f"{rss_waiting / _MB:,.0f} MB while {waiting_count:,} wait",
        f"actor processes: {processes_before} before, {processes_open} with every run open, {processes_waiting} while waiting",
        "hosts: " + "; ".join(f"{s.name}: {s.loaded} loaded, {s.unloaded} unloaded, {s.activations} activations" for s in host_stats),
    ]
    return MeasureResult(name=NAME, title=TITLE, figures=figures + waiting_figures, notes=notes + waiting_notes)
