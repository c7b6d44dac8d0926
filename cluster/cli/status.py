"""``soloist status``: what runs exist, at which version, with which agents; and, on a live
cluster, each subagent pool's replicas, waiting calls and queue wait."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from ray.exceptions import RayError
from rich.console import Console
from rich.table import Table

from actors import Orchestrator, OrchestratorClosed, OrchestratorNotFound, PoolStatus, pool_status
from cluster import connect
from cluster.storage import SqliteStore

__all__ = ["RunStatusRow", "StatusReport", "collect_status", "render_status"]


class RunStatusRow(BaseModel):
    """One run, stored or live."""

    model_config = ConfigDict(frozen=True)

    name: str
    source: str  # "store" or "live"
    version: int
    state_type: str
    agents: list[dict[str, Any]] = Field(default_factory=list)
    error: str | None = None
    """Why a live run could not be read (e.g. its state or caller class is not importable here)."""


class StatusReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    store: str | None = None
    address: str | None = None
    runs: list[RunStatusRow] = Field(default_factory=list)
    pools: list[PoolStatus] = Field(default_factory=list)
    """The subagent pools with a replica up (a live cluster only)."""


def _stored_runs(path: str) -> list[RunStatusRow]:
    store = SqliteStore(path)
    try:
        rows = []
        for info in store.list_runs():
            checkpoint, entries = store.load(info.name)
            version = entries[-1].version if entries else checkpoint.version
            agents = [{"agent_id": a.agent_id, **{k: a.record.get(k) for k in ("kind", "lifecycle", "updated_at")}}
                      for a in store.list_agents(info.name)]
            rows.append(RunStatusRow(name=info.name, source="store", version=version, state_type=info.state_type, agents=agents))
        return rows
    finally:
        store.close()


async def _live_runs() -> list[RunStatusRow]:
    """Every live run, read through the public ``Orchestrator`` API (read-only handles)."""
    rows = []
    for name in Orchestrator.list_live():
        try:
            stats = await Orchestrator.attach(name).statistics()
        except (OrchestratorNotFound, OrchestratorClosed):
            continue  # closed between the listing and the read
        except (RayError, ImportError) as exc:  # attaching loads the run's classes; report what failed
            rows.append(RunStatusRow(name=name, source="live", version=-1, state_type="?", error=f"{type(exc).__name__}: {exc}"))
            continue
        rows.append(RunStatusRow(name=stats.name, source="live", version=stats.version, state_type=stats.state_type))
    return rows


def collect_status(*, store: str | None, address: str | None) -> StatusReport:
    runs: list[RunStatusRow] = []
    pools: list[PoolStatus] = []
    if store is not None:
        runs += _stored_runs(store)
    if address is not None:
        connect(address)
        runs += asyncio.run(_live_runs())
        pools = asyncio.run(pool_status())
    return StatusReport(store=store, address=address, runs=runs, pools=pools)


def render_status(console: Console, report: StatusReport) -> None:
    if report.pools:
        _render_pools(console, report.pools)
    if not report.runs:
        console.print("no runs found")
        return
    table = Table(title="soloist runs")
    for col in ("run", "source", "version", "state", "agents"):
        table.add_column(col)
    for r in report.runs:
        agents = ", ".join(f"{a['agent_id']} ({a.get('lifecycle') or '?'})" for a in r.agents) or "-"
        if r.error is not None:
            agents = f"cannot read: {r.error}"
        table.add_row(r.name, r.source, str(r.version), r.state_type, agents)
    console.print(table)


def _render_pools(console: Console, pools: list[PoolStatus]) -> None:
    table = Table(title="subagent pools")
    for col in ("skill", "pool", "replicas", "running", "waiting", "queue wait p50", "nodes"):
        table.add_column(col)
    for p in pools:
        table.add_row(p.skill, p.pool, str(p.replicas), str(p.running), str(p.waiting),
                      f"{p.queue_wait_p50_s * 1000:.1f} ms", str(len(p.nodes)))
    console.print(table)
