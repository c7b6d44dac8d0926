"""(14) Durable pydantic-ai agents (issue 44): soloist against DBOS and plain pydantic-ai.

One pydantic-ai ``Agent`` (a ``FunctionModel`` answering after a configurable latency; each
conversation is 3 model requests and 2 tool calls, 5 steps) runs in four arms, their order
rotating round by round:

- **plain**: ``agent.run`` in this process, nothing durable (the floor);
- **DBOS**: pydantic-ai's ``DBOSAgent`` on DBOS with a SQLite system database (no server);
  each tool body is a ``@DBOS.step``, so, as in soloist, every model request *and* every tool
  call is a checkpointed step (DBOS runs function tools inline, unjournalled, otherwise);
- **soloist on SQLite** and **soloist on PostgreSQL**: ``SoloistAgent`` with ``store=``; each
  conversation is a run of its own (hosted, its own semaphore scope), its model requests
  handoffs to the model subagents, every step committed before the agent goes on.

Measured: conversations per second at 0 ms model latency (``agent_conversations`` a round,
``agent_in_flight`` at once), against DBOS (goal: 2x) and against plain; the wall time of
``agent_wide_conversations`` conversations started at once at ``agent_latency_s`` (200 ms)
against plain (goal: within 1.1x); the store's bytes per step against DBOS's. Overhead per
step (time per step over plain's, at 0 ms) and steps per second are in the notes.

The model answers in this process for plain and DBOS and in the model subagents' replicas for
soloist (the model object travels there, as it does for any provider). The PostgreSQL server
is ``SOLOIST_BENCH_POSTGRES_URL``'s when set, else a throw-away one started and deleted here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from actors import Orchestrator, run_host_name
from benchmarks._harness import BenchContext, Counter, close_run, run_name, start_runs, timed
from benchmarks.results import Figure, MeasureResult
from cluster.storage.pg_server import BENCH_ENV_URL, shared_server

NAME = "agents"
TITLE = "Durable pydantic-ai agents: soloist vs DBOS and plain pydantic-ai"
DBOS_TARGET = 2.0  # soloist's conversations/s at 0 ms >= 2x DBOS's, on both stores
WIDE_TARGET = 1.1  # wall time of the wide run at 200 ms <= 1.1x plain pydantic-ai's
MODEL_REQUESTS = 3
TOOL_CALLS = MODEL_REQUESTS - 1
STEPS = MODEL_REQUESTS + TOOL_CALLS
ARMS = ("plain", "dbos", "sqlite", "postgres")
_DBOS_LOGGERS = ("dbos", "sqlalchemy")


def dbos_missing() -> str | None:
    """Why the DBOS arm cannot run here (the ``dbos`` package of the ``bench`` extra), or None."""
    try:
        import dbos  # noqa: F401
        from pydantic_ai.durable_exec.dbos import DBOSAgent  # noqa: F401
    except ImportError as exc:
        return f"{exc} (pip install 'soloist[bench]')"
    return None


def settings(latency: float) -> dict[str, Any]:
    """The run's model settings that carry the model's latency (they travel with each request,
    to soloist's replicas too), so one agent serves both latencies."""
    return {"extra_body": {"latency_s": latency}}


async def _model(messages: list[Any], info: Any) -> Any:
    """The scripted model: after the latency its settings name, a tool call per response until
    the last, which answers with text. Module-level and pickled by value (``ship_by_value``),
    so replicas run the same code."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart

    latency = float(((info.model_settings or {}).get("extra_body") or {}).get("latency_s", 0.0))
    if latency:
        await asyncio.sleep(latency)
    n = sum(1 for message in messages if message.kind == "response")
    if n < TOOL_CALLS:
        return ModelResponse(parts=[ToolCallPart("lookup", {"key": f"k{n}"}, tool_call_id=f"c{n}")])
    returns = [part.content for message in messages for part in message.parts if isinstance(part, ToolReturnPart)]
    return ModelResponse(parts=[TextPart("done: " + ", ".join(str(r) for r in returns))])


def _lookup(key: str) -> str:
    """The agent's tool: a small lookup (what most tools of a conversation are)."""
    return f"value of {key}"


def build_agent(name: str, *, tool: Callable[[str], str] = _lookup) -> Any:
    """The benchmark's agent: the same model and tool in every arm (DBOS's tool body a step)."""
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    agent: Any = Agent(FunctionModel(_model), name=name)

    @agent.tool_plain
    def lookup(key: str) -> str:
        """Look a key up."""
        return tool(key)

    return agent


def _check(output: Any) -> None:
    if output != "done: " + ", ".join(_lookup(f"k{n}") for n in range(TOOL_CALLS)):
        raise RuntimeError(f"a conversation ended with {output!r}")


async def _conversations(n: int, in_flight: int, one: Callable[[int], Awaitable[Any]]) -> None:
    """``n`` conversations, at most ``in_flight`` at once, each output checked."""
    gate = asyncio.Semaphore(in_flight)

    async def limited(i: int) -> None:
        async with gate:
            _check((await one(i)).output)

    await asyncio.gather(*[limited(i) for i in range(n)])


def _sqlite_bytes(path: str) -> int:
    """A SQLite file and its WAL after a checkpoint."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def _postgres_bytes(url: str) -> int:
    """Every table of the URL's schema, indexes and TOAST included."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'"
        ).fetchone()
    return int(row[0]) if row else 0


class _Dbos:
    """DBOS in this process: a SQLite system database in ``tmp``, the ``DBOSAgent`` registered
    before launch, destroyed at ``close``."""

    def __init__(self, tmp: str) -> None:
        from dbos import DBOS
        from pydantic_ai.durable_exec.dbos import DBOSAgent

        for name in _DBOS_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        self.path = os.path.join(tmp, "dbos.sqlite")
        self._dbos = DBOS
        DBOS(config={"name": f"soloist-bench-{uuid.uuid4().hex[:6]}", "system_database_url": f"sqlite:///{self.path}",
                     "log_level": "WARNING"})
        step = DBOS.step(name=f"bench-lookup-{uuid.uuid4().hex[:6]}")(_lookup)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DBOSAgent is deprecated for DBOSDurability: the issue names it
            self.agent = DBOSAgent(build_agent("bench-dbos", tool=step))
        DBOS.launch()

    def close(self) -> None:
        self._dbos.destroy(destroy_registry=True)


async def _keep_hosts(stores: list[str]) -> list[Orchestrator[Any]]:
    """One idle run on each host that holds runs of ``stores``, open for the whole measure.

    A host with no run retires after ``SOLOIST_HOST_RETIRE_S`` (30 s), and an arm's store sits
    idle that long while the other arms run on a loaded machine; ``SoloistAgent`` attaches each
    new run id first, and that attach, sent to a host retiring meanwhile, fails with
    ``ActorDiedError`` (opening a run retries on a fresh host; attaching does not). A service
    keeps its hosts busy; these runs do the same here."""
    keepers: dict[str, tuple[str, str]] = {}
    for store in stores:
        for _ in range(64):
            name = run_name("agents-keeper")
            keepers.setdefault(run_host_name(name, store), (name, store))
    return await start_runs(*[lambda n=n, s=s: Orchestrator(Counter(), name=n, store=s) for n, s in keepers.values()])


def steps(ctx: BenchContext) -> int:
    return 2 * ctx.config.rounds + 4


async def run(ctx: BenchContext) -> MeasureResult:
    missing = dbos_missing()
    if missing is not None:
        return MeasureResult(name=NAME, title=TITLE, skipped=f"DBOS cannot run: {missing}")
    from actors.pydantic_ai import SoloistAgent

    cfg = ctx.config
    latency = cfg.agent_latency_s
    ctx.step("starting PostgreSQL")
    server = await asyncio.to_thread(shared_server, BENCH_ENV_URL)
    where = f"the server of {BENCH_ENV_URL}" if server.external else "a throw-away local server (fsync on)"
    figures: list[Figure] = []
    notes: list[str] = []
    dbos: _Dbos | None = None
    keepers: list[Orchestrator[Any]] = []
    # DBOS makes its own thread pool the loop's default executor when a workflow starts (and shuts
    # it down in ``destroy``): every other arm, and the runner after us, get this one back.
    loop = asyncio.get_running_loop()
    threads = ThreadPoolExecutor(thread_name_prefix="bench-agents")
    scratch = tempfile.TemporaryDirectory(prefix="soloist-bench-agents-", ignore_cleanup_errors=True)
    tmp = scratch.name
    try:
        sqlite_path = os.path.join(tmp, "soloist.sqlite")
        pg_url = server.fresh_url()
        keepers = await _keep_hosts([os.path.join(tmp, "keepers.sqlite"), server.fresh_url()])
        ctx.step("starting DBOS and the model subagents")
        dbos = await asyncio.to_thread(_Dbos, tmp)
        agents: dict[str, Any] = {
            "plain": build_agent("bench-plain"), "dbos": dbos.agent,
            **{kind: SoloistAgent(build_agent(f"bench-{kind}"), store=store, replicas=cfg.replicas)
               for kind, store in (("sqlite", sqlite_path), ("postgres", pg_url))},
        }
        prefix = uuid.uuid4().hex[:6]

        counter = iter(range(1 << 60))  # soloist's run ids: one run per conversation

        def arm(kind: str, speed: str) -> Callable[[int], Awaitable[Any]]:
            agent, model_settings = agents[kind], settings(latency if speed == "slow" else 0.0)
            if kind in ("plain", "dbos"):
                return lambda i: agent.run(f"conversation {i}", model_settings=model_settings)
            return lambda i: agent.run(f"conversation {i}", model_settings=model_settings,
                                       run_id=f"{prefix}-{next(counter)}")

        # Warm every arm (model subagents started, stores created, DBOS's first workflow).
        for kind in ARMS:
            await _conversations(1, 1, arm(kind, "fast"))
            loop.set_default_executor(threads)
        done = {kind: 1 for kind in ARMS}  # conversations each store holds

        rates: dict[str, list[float]] = {kind: [] for kind in ARMS}
        n, in_flight = cfg.agent_conversations, cfg.agent_in_flight
        for r in range(cfg.rounds):
            ctx.step(f"0 ms model: round {r + 1} of {cfg.rounds}, {n} conversations each, {in_flight} at once")
            order = ARMS[r % len(ARMS):] + ARMS[:r % len(ARMS)]
            for kind in order:
                seconds = await timed(lambda: _conversations(n, in_flight, arm(kind, "fast")))
                loop.set_default_executor(threads)
                rates[kind].append(n / seconds)
                done[kind] += n

        walls: dict[str, list[float]] = {kind: [] for kind in ARMS}
        wide = cfg.agent_wide_conversations
        for r in range(cfg.rounds):
            ctx.step(f"{latency * 1000:.0f} ms model: round {r + 1} of {cfg.rounds}, {wide} conversations at once")
            order = ARMS[r % len(ARMS):] + ARMS[:r % len(ARMS)]
            for kind in order:
                walls[kind].append(await timed(lambda: _conversations(wide, wide, arm(kind, "slow"))))
                loop.set_default_executor(threads)
                done[kind] += wide

        ctx.step("measuring the stores")
        size = {"dbos": await asyncio.to_thread(_sqlite_bytes, dbos.path),
                "sqlite": await asyncio.to_thread(_sqlite_bytes, sqlite_path),
                "postgres": await asyncio.to_thread(_postgres_bytes, pg_url)}
        per_step = {kind: size[kind] / (done[kind] * STEPS) for kind in size}

        label = {"sqlite": "soloist on SQLite", "postgres": "soloist on PostgreSQL", "dbos": "DBOS (SQLite)"}
        common: dict[str, float | int | str] = {"steps_per_conversation": STEPS, "in_flight": in_flight}
        for kind in ("sqlite", "postgres"):
            figures.append(Figure(
                measure=NAME, name=f"{label[kind]}: conversations/s at 0 ms, vs DBOS", values=rates[kind],
                baselines=rates["dbos"], baseline_name="DBOSAgent, SQLite system database, same rounds",
                unit="conv/s", better="higher", target=DBOS_TARGET, params={**common, "conversations": n, "store": kind}))
        for kind in ("dbos", "sqlite", "postgres"):
            figures.append(Figure(
                measure=NAME, name=f"{label[kind]}: conversations/s at 0 ms, vs plain", values=rates[kind],
                baselines=rates["plain"], baseline_name="plain pydantic-ai in this process, same rounds",
                unit="conv/s", better="higher", params={**common, "conversations": n}))
        for kind in ("sqlite", "postgres", "dbos"):
            figures.append(Figure(
                measure=NAME, name=f"{label[kind]}: wall time of {wide:,} conversations at {latency * 1000:.0f} ms",
                values=walls[kind], baselines=walls["plain"],
                baseline_name="plain pydantic-ai, the same conversations at once, same rounds", unit="s",
                better="lower", target=WIDE_TARGET if kind != "dbos" else None,
                params={"conversations": wide, "latency_s": latency, "steps_per_conversation": STEPS}))
        for kind in ("sqlite", "postgres"):
            figures.append(Figure(
                measure=NAME, name=f"{label[kind]}: store bytes per step", values=[per_step[kind]],
                baselines=[per_step["dbos"]], baseline_name="DBOS's SQLite system database, the same conversations",
                unit="B", better="lower", params={"steps": done[kind] * STEPS, "store": kind}))

        med = {kind: statistics.median(rates[kind]) for kind in ARMS}
        per_step_s = {kind: 1 / (med[kind] * STEPS) for kind in ARMS}
        notes.append("at 0 ms, " + ", ".join(
            f"{kind} {med[kind]:,.1f} conv/s = {med[kind] * STEPS:,.0f} steps/s" for kind in ARMS)
            + f" ({STEPS} steps a conversation: {MODEL_REQUESTS} model requests, {TOOL_CALLS} tool calls; "
              f"{in_flight} conversations at once)")
        notes.append("overhead per step over plain at 0 ms (time per step of the arm minus plain's, at the same "
                     "concurrency): " + ", ".join(f"{kind} {(per_step_s[kind] - per_step_s['plain']) * 1e6:,.0f} us"
                                                  for kind in ("dbos", "sqlite", "postgres")))
        notes.append(f"at {latency * 1000:.0f} ms, {wide:,} conversations at once (ideal {MODEL_REQUESTS * latency:.1f} s): "
                     + ", ".join(f"{kind} {statistics.median(walls[kind]):.2f} s = "
                                 f"{wide * STEPS / statistics.median(walls[kind]):,.0f} steps/s" for kind in ARMS))
        notes.append("store bytes per step: " + ", ".join(
            f"{label[kind]} {per_step[kind]:,.0f} ({size[kind] / 1e6:.2f} MB for {done[kind]:,} conversations)"
            for kind in ("dbos", "sqlite", "postgres")))
        notes.append(f"PostgreSQL: {where}. soloist: one run per conversation (hosted), {cfg.replicas} model "
                     "subagent replica(s) per agent; DBOS: DBOSAgent, tool bodies as @DBOS.step")
    finally:
        ctx.step("stopping DBOS and PostgreSQL")
        loop.set_default_executor(threads)  # the loop's from here on: asyncio.run shuts it down
        try:
            for keeper in keepers:
                await close_run(keeper)
            if dbos is not None:
                await asyncio.to_thread(dbos.close)
        finally:
            loop.set_default_executor(threads)
            try:
                await asyncio.to_thread(server.destroy)
            finally:
                scratch.cleanup()
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)
