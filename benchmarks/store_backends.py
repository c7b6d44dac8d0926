"""(13) The stores side by side (issue 30): SQLite and PostgreSQL under one run each.

Per store (a SQLite file in a temporary directory; a PostgreSQL schema of its own):

- **apply throughput**: ``apply(fn)`` of one turn (``n += 1`` and a message of about 300
  characters set as the turn's last message, so each journal entry is the diff of about 330
  characters), ``durable_apply_calls`` submitted at once and awaited together, with ``batch``
  and with ``sync`` durability, against the same calls to the same run without a store; every
  variant is timed once a round, the order rotating round by round. Also a ``batch`` run of
  each store that applied 1,500 turns (past its first checkpoint), was closed and attached
  again, against the new ``batch`` run of that store in the same rounds: a run taken up
  again must not pay a store read per group of writes for request ids it could hold.
- **store size after a 500-turn run**: an ``AgentState`` run (``sync``, checkpoints every
  1,000 versions and the default retention) appends one message of about 400 characters a
  turn through the orchestrator, as LangGraph's figure does; then the run is closed and the
  store measured: SQLite file + WAL after a ``wal_checkpoint(TRUNCATE)``, PostgreSQL
  ``pg_total_relation_size`` of every soloist table (indexes and TOAST included) of the run's
  schema. Against the goal of 5 MB.
- **store size after 100,000 writes** with ``keep_versions=1000`` against the same writes
  without retention: the journal a durable orchestrator writes (one ``apply_batch`` entry a
  version, a message every 100th), groups of 64 per commit (``batch``), a checkpoint every
  1,000 versions and the orchestrator's compaction at each checkpoint, written to the store
  directly (no Ray: the orchestrator would only add its apply time).
- **recovery**: a run of ``store_recovery_changes`` changes (``batch``, a checkpoint every
  1,000), built through the orchestrator and closed, is attached again; timed from
  ``Orchestrator.attach`` until ``version()`` answers the last version. Against attaching a
  closed run of one change in the same rounds, and against the 2 s budget.

The PostgreSQL server is ``SOLOIST_BENCH_POSTGRES_URL``'s when set (each store a new schema,
dropped at the end), else a throw-away one started here (``cluster.storage.pg_server``) and
deleted at the end.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from pydantic import BaseModel

from actors import Orchestrator
from benchmarks._harness import BenchContext, close_run, run_name, start_runs, timed
from benchmarks.results import Figure, MeasureResult
from benchmarks.store_retention import CHECKPOINT_EVERY, journal_writes
from cluster.storage import PostgresStore, SqliteStore
from cluster.storage.pg_server import BENCH_ENV_URL, PostgresServer, shared_server
from coordinators import AgentState, Message

NAME = "store_backends"
TITLE = "SQLite and PostgreSQL stores: apply throughput, store size, recovery"
BATCH_TARGET = 0.8  # batch durability on PostgreSQL >= 0.8 of apply without a store
SIZE_GOAL_BYTES = 5_000_000  # <= 5 MB after 500 turns of messages
RECOVERY_BUDGET_S = 2.0  # a 100,000-change run recovers within 2 s
STORES = ("sqlite", "postgres")
_CHUNK = 1_000  # applies in flight while a recovery run is built
_AGAIN_APPLIES = 1_500  # a run taken up again: past its first checkpoint (every 1,000 versions)
_TURN_TEXT = "x" * 300
_MESSAGE_TEXT = "y" * 400


class Turns(BaseModel):
    """The state of the throughput runs: a turn counter and the turn's last message."""

    n: int = 0
    last: str = ""


class Journalled(BaseModel):
    n: int = 0


def _turn(state: Turns) -> None:
    state.n += 1
    state.last = f"turn {state.n}: {_TURN_TEXT}"


def _bump(state: Journalled) -> None:
    state.n += 1


@dataclass
class _Store:
    """Where one store lives: the ``store=`` argument of a run, and how to measure its size."""

    kind: str
    location: str  # a SQLite path or a PostgreSQL URL

    def open(self, durability: str = "sync") -> SqliteStore | PostgresStore:
        if self.kind == "sqlite":
            return SqliteStore(self.location, durability=durability)  # type: ignore[arg-type]
        return PostgresStore(self.location, durability=durability)  # type: ignore[arg-type]

    def size(self) -> int:
        """Bytes on disk: SQLite file + WAL after a checkpoint; PostgreSQL's tables of the schema."""
        if self.kind == "sqlite":
            with sqlite3.connect(self.location) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.close()
            return sum(os.path.getsize(p) for p in (self.location, self.location + "-wal") if os.path.exists(p))
        with psycopg.connect(self.location, autocommit=True) as conn:
            row = conn.execute(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'"
            ).fetchone()
        return int(row[0]) if row else 0


def steps(ctx: BenchContext) -> int:
    return ctx.config.rounds + 4 * len(STORES) + 2


def _place(server: PostgresServer, tmp: str, kind: str, label: str) -> _Store:
    """A new, empty store of ``kind``: a file in ``tmp``, or a schema of its own on ``server``."""
    if kind == "sqlite":
        return _Store("sqlite", os.path.join(tmp, f"{label}-{uuid.uuid4().hex[:6]}.sqlite"))
    return _Store("postgres", server.fresh_url())


async def _pipelined(n: int, submit: Callable[[], Awaitable[Any]]) -> None:
    await asyncio.gather(*[submit() for _ in range(n)])


async def _throughput(ctx: BenchContext, server: PostgresServer, tmp: str) -> dict[str, list[float]]:
    """Applies per second of each variant in each round: ``plain`` and ``<store> <durability>``."""
    cfg = ctx.config
    places = {(kind, d): _place(server, tmp, kind, f"apply-{d}") for kind in STORES for d in ("batch", "sync")}
    keys = ["plain", *[f"{kind} {d}" for kind, d in places]]
    factories: list[Callable[[], Orchestrator[Any]]] = [lambda: Orchestrator(Turns(), name=run_name("plain"))]
    for (kind, d), place in places.items():
        factories.append(lambda p=place, d=d, k=kind: Orchestrator(Turns(), name=run_name(f"{k}-{d}"), store=p.location,
                                                                     durability=d))
    runs = dict(zip(keys, await start_runs(*factories)))
    try:
        for kind in STORES:  # a run past its first checkpoint, closed and taken up again
            runs[f"{kind} batch, taken up again"] = await _taken_up_again(places[(kind, "batch")])
    except BaseException:
        for orch in runs.values():
            await close_run(orch)
        raise
    keys = list(runs)
    rates: dict[str, list[float]] = {k: [] for k in keys}
    try:
        for orch in runs.values():
            await orch.apply(_turn)
        n = cfg.durable_apply_calls
        for r in range(cfg.rounds):
            ctx.step(f"apply throughput, round {r + 1} of {cfg.rounds}")
            shift = r % len(keys)
            for key in keys[shift:] + keys[:shift]:
                orch = runs[key]
                seconds = await timed(lambda: _pipelined(n, lambda: orch.apply(_turn)))
                rates[key].append(n / seconds)
    finally:
        for orch in runs.values():
            await close_run(orch)
    return rates


async def _taken_up_again(place: _Store) -> Orchestrator[Any]:
    """A ``batch`` run of ``place`` that applied ``_AGAIN_APPLIES`` turns (past its first
    checkpoint: its oldest request ids are in the store only), closed and attached again."""
    name = run_name(f"{place.kind}-again")
    first = await asyncio.to_thread(lambda: Orchestrator(Turns(), name=name, store=place.location, durability="batch"))
    try:
        await _pipelined(_AGAIN_APPLIES, lambda: first.apply(_turn))
    finally:
        await close_run(first)
    return await asyncio.to_thread(Orchestrator.attach, name, store=place.location, durability="batch")


async def _turns_size(place: _Store, turns: int) -> tuple[int, int]:
    """Bytes of the store after a run of ``turns`` turns, each appending one message; and the
    bytes of the final state's JSON."""
    orch = await Orchestrator.open(AgentState(), name=run_name("turns"), store=place.location, durability="sync")
    try:
        for turn in range(1, turns + 1):
            message = Message(role="user" if turn % 2 else "assistant", content=f"turn {turn}: {_MESSAGE_TEXT}")
            await orch.apply(lambda s, m=message: s.messages.append(m))
        state_bytes = len((await orch.snapshot()).model_dump_json())
    finally:
        await close_run(orch)
    return await asyncio.to_thread(place.size), state_bytes


def _fill(place: _Store, writes: int, keep_versions: int | None) -> None:
    """``writes`` versions journalled as a durable orchestrator journals ``apply_batch``, with
    its checkpoints and compaction (``store_retention``'s writes, on either store)."""
    store = place.open("batch")
    try:
        journal_writes(store, writes, keep_versions)
    finally:
        store.close()


async def _recovery(ctx: BenchContext, kind: str, server: PostgresServer, tmp: str) -> tuple[list[float], list[float], float]:
    """Seconds to attach a closed run of N changes and of one change, round by round; and the
    applies per second of building the long one."""
    cfg = ctx.config
    changes = cfg.store_recovery_changes
    places = [_place(server, tmp, kind, f"recover-{label}") for label in ("long", "one")]
    names = [run_name(f"recover-{kind}-long"), run_name(f"recover-{kind}-one")]
    long_run, one_run = await start_runs(
        *[lambda p=p, n=n: Orchestrator(Journalled(), name=n, store=p.location, durability="batch",
                                        checkpoint_every=CHECKPOINT_EVERY) for p, n in zip(places, names)])
    try:
        await one_run.apply(_bump)
        ctx.step(f"{kind}: journalling {changes:,} changes")
        started = time.perf_counter()
        done = 0
        while done < changes:
            k = min(_CHUNK, changes - done)
            await asyncio.gather(*[long_run.apply(_bump) for _ in range(k)])
            done += k
        build_rate = changes / (time.perf_counter() - started)
    finally:
        await close_run(long_run)
        await close_run(one_run)

    async def attach(place: _Store, name: str, expected: int) -> float:
        started = time.perf_counter()
        again = await asyncio.to_thread(Orchestrator.attach, name, store=place.location, durability="batch")
        try:
            version = await again.version()
            seconds = time.perf_counter() - started
            if version != expected or (await again.snapshot()).n != expected:
                raise RuntimeError(f"{kind}: attached {name} at version {version}; expected {expected}")
        finally:
            await close_run(again)
        return seconds

    ctx.step(f"{kind}: attaching the runs again, {cfg.recovery_kills} round(s)")
    ours: list[float] = []
    base: list[float] = []
    for r in range(cfg.recovery_kills):
        pair = [(ours, places[0], names[0], changes), (base, places[1], names[1], 1)]
        for sink, place, name, expected in (pair if r % 2 == 0 else pair[::-1]):
            sink.append(await attach(place, name, expected))
    return ours, base, build_rate


def _median(values: list[float]) -> float:
    return statistics.median(values)


async def run(ctx: BenchContext) -> MeasureResult:
    cfg = ctx.config
    figures: list[Figure] = []
    notes: list[str] = []
    ctx.step("starting PostgreSQL")
    server = await asyncio.to_thread(shared_server, BENCH_ENV_URL)
    where = f"the server of {BENCH_ENV_URL}" if server.external else "a throw-away local server (fsync on)"
    try:
        with tempfile.TemporaryDirectory(prefix="soloist-bench-") as tmp:
            rates = await _throughput(ctx, server, tmp)
            for kind in STORES:
                for durability, target in (("batch", BATCH_TARGET if kind == "postgres" else None), ("sync", None)):
                    figures.append(Figure(
                        measure=NAME, name=f"{kind}: apply, {durability} durability", values=rates[f"{kind} {durability}"],
                        baselines=rates["plain"], baseline_name="the same applies to a run without a store, same rounds",
                        unit="ops/s", better="higher", target=target,
                        params={"calls": cfg.durable_apply_calls, "store": kind, "durability": durability},
                    ))
                figures.append(Figure(
                    measure=NAME, name=f"{kind}: apply, batch durability, a run taken up again",
                    values=rates[f"{kind} batch, taken up again"], baselines=rates[f"{kind} batch"],
                    baseline_name="the same applies to a new run of the same store, same rounds",
                    unit="ops/s", better="higher",
                    params={"calls": cfg.durable_apply_calls, "store": kind, "durability": "batch",
                            "applied_before": _AGAIN_APPLIES},
                ))
            med = {k: _median(v) for k, v in rates.items()}
            notes.append("applies per second (median of rounds): " + ", ".join(f"{k} {v:,.0f}" for k, v in med.items())
                         + f"; {cfg.durable_apply_calls:,} applies in flight, each a turn (~330-character diff)")

            for kind in STORES:
                ctx.step(f"{kind}: a {cfg.store_turns}-turn run")
                place = _place(server, tmp, kind, "turns")
                size, state_bytes = await _turns_size(place, cfg.store_turns)
                figures.append(Figure(
                    measure=NAME, name=f"{kind}: store size after {cfg.store_turns:,} turns of one message",
                    values=[size / 1e6], baselines=[SIZE_GOAL_BYTES / 1e6], baseline_name="the goal: 5 MB",
                    unit="MB", better="lower", target=1.0, params={"turns": cfg.store_turns, "store": kind},
                ))
                notes.append(f"{kind}: {cfg.store_turns} turns: store {size / 1e6:.2f} MB; the final state's JSON "
                             f"{state_bytes / 1e6:.2f} MB")

            for kind in STORES:
                ctx.step(f"{kind}: {cfg.store_writes:,} writes with and without retention")
                sizes: dict[str, int] = {}
                seconds: dict[str, float] = {}
                for label, keep in (("kept", cfg.store_keep_versions), ("all", None)):
                    place = _place(server, tmp, kind, f"writes-{label}")
                    started = time.perf_counter()
                    await asyncio.to_thread(_fill, place, cfg.store_writes, keep)
                    seconds[label] = time.perf_counter() - started
                    sizes[label] = await asyncio.to_thread(place.size)
                figures.append(Figure(
                    measure=NAME, name=f"{kind}: store size after {cfg.store_writes:,} writes, keep_versions={cfg.store_keep_versions:,}",
                    values=[sizes["kept"] / 1e6], baselines=[sizes["all"] / 1e6],
                    baseline_name="the same writes without retention", unit="MB", better="lower",
                    params={"writes": cfg.store_writes, "keep_versions": cfg.store_keep_versions, "store": kind},
                ))
                notes.append(f"{kind}: {cfg.store_writes:,} writes: {sizes['all'] / 1e6:.2f} MB without retention "
                             f"({seconds['all']:.1f} s), {sizes['kept'] / 1e6:.2f} MB with keep_versions="
                             f"{cfg.store_keep_versions:,} ({seconds['kept']:.1f} s)")

            for kind in STORES:
                ours, base, build_rate = await _recovery(ctx, kind, server, tmp)
                params: dict[str, float | int | str] = {"changes": cfg.store_recovery_changes, "store": kind,
                                                        "checkpoint_every": CHECKPOINT_EVERY}
                label = f"{kind}: recovery of {cfg.store_recovery_changes:,} changes (attach until version() answers)"
                figures.append(Figure(measure=NAME, name=label, values=ours, baselines=base,
                                      baseline_name="attaching a closed run of one change, same rounds", unit="s",
                                      better="lower", params=params))
                figures.append(Figure(measure=NAME, name=f"{label}, vs the budget", values=ours,
                                      baselines=[RECOVERY_BUDGET_S] * len(ours), baseline_name="the 2 s budget", unit="s",
                                      better="lower", target=1.0, params=params))
                notes.append(f"{kind}: recovery run journalled at {build_rate:,.0f} applies/s (batch, {_CHUNK:,} in flight); "
                             f"attached in {_median(ours):.2f} s, a one-change run in {_median(base):.2f} s")
    finally:
        ctx.step("stopping PostgreSQL")
        await asyncio.to_thread(server.destroy)
    notes.append(f"PostgreSQL: {where}; each store a schema of its own. SQLite: a file in a temporary directory.")
    return MeasureResult(name=NAME, title=TITLE, figures=figures, notes=notes)
