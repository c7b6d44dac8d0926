"""``soloist status``: a page of the runs (version, status, host, agents) with the count of
every run by status; on a live cluster also the run hosts (runs loaded and unloaded), each
subagent pool's replicas, waiting calls and queue wait, and the tokens the model calls used:
per run and agent (the skill that made them) and per model, as the metrics count them.

Only the runs of the page are read (their last version in one store query, their agents,
live ones through ``Orchestrator.statistics``); the rest are counted from the run index
(``cluster.cli.run_index``). An unloaded hosted run is not attached to (that would load it):
its host's record and the store say what it is.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from ray.exceptions import RayError
from rich.console import Console
from rich.table import Table

from actors import HostStatistics, Orchestrator, OrchestratorClosed, OrchestratorNotFound, PoolStatus, pool_status
from cluster import connect
from cluster.metrics import TokenTotals, llm_token_totals, read_totals, run_token_totals
from cluster.cli.run_index import DEFAULT_LIMIT, IndexedRun, RunIndexPage, check_query, index_runs
from cluster.storage import SqliteStore, StoreHealth, StoreUnreachable, open_store, redact

if TYPE_CHECKING:  # a PostgreSQL store is loaded only when used (cluster.storage)
    from cluster.storage import PostgresStore

__all__ = ["RunStatusRow", "StatusReport", "collect_status", "render_status"]


class RunStatusRow(BaseModel):
    """One run, stored or live."""

    model_config = ConfigDict(frozen=True)

    name: str
    source: str  # "live" (read from its orchestrator or its host) or "store"
    version: int
    state_type: str
    agents: list[dict[str, Any]] = Field(default_factory=list)
    error: str | None = None
    """Why the run could not be read (e.g. its state or caller class is not importable here)."""
    status: str = "none"
    """What the run's driver recorded: running, waiting, a final status, or none."""
    stored: bool = False
    host: str | None = None
    """A live run's host actor, or "dedicated" (an actor of its own); None when not live."""
    loaded: bool | None = None
    """A hosted run: in its host's memory (False: unloaded until its next call)."""
    tokens: dict[str, TokenTotals] = Field(default_factory=dict)
    """Tokens its handoffs' model calls used, by agent (the skill); a live cluster only."""


class StatusReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    store: str | None = None
    """The store read: its file, or its URL without the password."""
    store_health: StoreHealth | None = None
    """Whether the store answers (a server: its version and the latency of a trivial query)."""
    address: str | None = None
    runs: list[RunStatusRow] = Field(default_factory=list)
    """The page of runs asked for (``offset``, ``limit``, ``status``)."""
    total: int = 0
    """The runs that match ``status`` (every run when it is None)."""
    offset: int = 0
    limit: int = DEFAULT_LIMIT
    status: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    """Every run by status, whatever the filter."""
    hosts: list[HostStatistics] = Field(default_factory=list)
    """The run hosts (a live cluster only)."""
    pools: list[PoolStatus] = Field(default_factory=list)
    """The subagent pools with a replica up (a live cluster only)."""
    models: dict[str, TokenTotals] = Field(default_factory=dict)
    """Tokens used by model calls, by model, across every run (a live cluster only)."""


def collect_status(*, store: str | None, address: str | None, offset: int = 0, limit: int = DEFAULT_LIMIT,
                   status: str | None = None) -> StatusReport:
    """The page of runs from ``offset`` (at most ``limit``, those with ``status`` when given)
    of ``store`` and, with ``address``, of that cluster; ``ValueError`` for a bad page."""
    query = check_query(offset, limit, status)
    pools: list[PoolStatus] = []
    if address is not None:
        connect(address)
    try:
        opened = open_store(store) if store is not None else None
    except StoreUnreachable as exc:  # the report is the store's health: say why it does not answer
        unreachable = StoreHealth(location=exc.path, kind="postgresql", reachable=False, error=str(exc))
        return StatusReport(store=exc.path, store_health=unreachable, address=address)
    health = opened.health() if opened is not None else None
    try:
        page = index_runs(opened, query, live=address is not None)
        rows = _read_page(page, opened)
    finally:
        if opened is not None:
            opened.close()
    models: dict[str, TokenTotals] = {}
    if address is not None:
        pools = asyncio.run(pool_status())
        totals = read_totals()
        models = llm_token_totals(totals)
        rows = _with_tokens(rows, run_token_totals(totals))
    return StatusReport(store=redact(store) if store is not None else None, store_health=health, address=address, runs=rows, total=page.total, offset=page.offset, limit=page.limit,
                        status=page.status, counts=page.counts, hosts=page.hosts, pools=pools, models=models)


def _with_tokens(rows: list[RunStatusRow], by_run: dict[tuple[str, str], TokenTotals]) -> list[RunStatusRow]:
    """Each row with the tokens its run's agents used (as the metrics count them)."""
    found: dict[str, dict[str, TokenTotals]] = {}
    for (run, skill), used in by_run.items():
        found.setdefault(run, {})[skill] = used
    return [row.model_copy(update={"tokens": found[row.name]}) if row.name in found else row for row in rows]


def _read_page(page: RunIndexPage, store: SqliteStore | PostgresStore | None) -> list[RunStatusRow]:
    """Each run of the page read in full: stored ones from the store, live loaded ones
    through their orchestrator (concurrently)."""
    stored = [r.name for r in page.runs if r.stored]
    versions = store.last_versions(stored) if store is not None and stored else {}
    attach = [r for r in page.runs if r.live and r.loaded is not False]
    live = dict(zip([r.name for r in attach], asyncio.run(_live_reads(attach)))) if attach else {}
    rows = []
    for run in page.runs:
        row = RunStatusRow(name=run.name, source="live" if run.live else "store", status=run.status, stored=run.stored,
                           host=run.host, loaded=run.loaded, state_type=run.state_type or "?",
                           version=versions.get(run.name, run.version if run.version is not None else -1))
        if run.name in live:
            row = row.model_copy(update=live[run.name])
        if run.stored and store is not None:
            try:
                row = row.model_copy(update={"agents": _agents(store, run.name)})
            except Exception as exc:  # one damaged run must not hide the page: say what failed
                row = row.model_copy(update={"error": row.error or f"{type(exc).__name__}: {exc}"})
        rows.append(row)
    return rows


def _agents(store: SqliteStore | PostgresStore, name: str) -> list[dict[str, Any]]:
    return [{"agent_id": a.agent_id, **{k: a.record.get(k) for k in ("kind", "lifecycle", "updated_at")}}
            for a in store.list_agents(name)]


async def _live_reads(runs: list[IndexedRun]) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(_live_read(r.name) for r in runs)))


async def _live_read(name: str) -> dict[str, Any]:
    """What a live run's orchestrator says (read-only handle), as updates of its row."""
    try:
        stats = await (await asyncio.to_thread(Orchestrator.attach, name)).statistics()
    except (OrchestratorNotFound, OrchestratorClosed) as exc:
        return {"error": f"closed while being read ({type(exc).__name__})"}
    except (RayError, ImportError) as exc:  # attaching loads the run's classes; report what failed
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"version": stats.version, "state_type": stats.state_type}


def render_status(console: Console, report: StatusReport) -> None:
    if report.store_health is not None:
        console.print(health_line(report.store_health), markup=False, highlight=False, soft_wrap=True)
    if report.pools:
        _render_pools(console, report.pools)
    if report.hosts:
        _render_hosts(console, report.hosts)
    if report.models:
        _render_models(console, report.models)
    if not report.runs:
        console.print(_empty_line(report), markup=False, highlight=False, soft_wrap=True)
        return
    table = Table(title="soloist runs")
    tokens = any(r.tokens for r in report.runs)
    for col in ("run", "source", "status", "host", "version", "state", "agents") + (("tokens",) if tokens else ()):
        table.add_column(col)
    for r in report.runs:
        agents = ", ".join(f"{a['agent_id']} ({a.get('lifecycle') or '?'})" for a in r.agents) or "-"
        if r.error is not None:
            agents = f"cannot read: {r.error}"
        host = r.host or "-"
        if r.loaded is not None:
            host += " (loaded)" if r.loaded else " (unloaded)"
        cells = [r.name, r.source, r.status, host, str(r.version), r.state_type, agents]
        if tokens:
            cells.append(_tokens_cell(r.tokens))
        table.add_row(*cells)
    console.print(table)
    console.print(_page_line(report), markup=False, highlight=False, soft_wrap=True)


def health_line(health: StoreHealth) -> str:
    """``store postgresql://u@h/db: reachable, PostgreSQL 15.4, 0.4 ms`` or the error."""
    if not health.reachable:
        return f"store {health.location}: UNREACHABLE ({health.error})"
    latency = f", {health.latency_ms:.1f} ms" if health.latency_ms is not None else ""
    return f"store {health.location}: reachable, {health.server or health.kind}{latency}"


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{status} {n}" for status, n in counts.items()) or "none"


def _page_line(report: StatusReport) -> str:
    """``showing 101–150 of 20000 runs (use --offset/--limit); by status: ...``"""
    first, last = report.offset + 1, report.offset + len(report.runs)
    which = "runs" if report.status is None else f"runs with status {report.status}"
    return (f"showing {first}–{last} of {report.total} {which} (use --offset/--limit); "
            f"by status: {_counts_text(report.counts)}")


def _empty_line(report: StatusReport) -> str:
    every = sum(report.counts.values())
    if every == 0:
        return "no runs found"
    which = "runs" if report.status is None else f"runs with status {report.status}"
    return (f"no {which} from offset {report.offset}: there are {report.total} (use --offset/--limit); "
            f"by status: {_counts_text(report.counts)}")


def _render_hosts(console: Console, hosts: list[HostStatistics]) -> None:
    table = Table(title="run hosts")
    for col in ("host", "pid", "loaded", "unloaded", "activations", "unloads"):
        table.add_column(col)
    for h in hosts:
        table.add_row(h.name + (" (restarted)" if h.restarted else ""), str(h.pid), str(h.loaded), str(h.unloaded),
                      str(h.activations), str(h.unloads))
    console.print(table)


def _tokens_cell(tokens: dict[str, TokenTotals]) -> str:
    """``1234 (llm.chat 1000 in / 200 out; ...)``, or ``-``."""
    if not tokens:
        return "-"
    total = sum(t.total_tokens for t in tokens.values())
    parts = "; ".join(f"{skill} {t.input_tokens} in / {t.output_tokens} out" for skill, t in sorted(tokens.items()))
    return f"{total} ({parts})"


def _render_models(console: Console, models: dict[str, TokenTotals]) -> None:
    table = Table(title="model tokens")
    for col in ("model", "input", "output", "total"):
        table.add_column(col)
    for model, t in sorted(models.items()):
        table.add_row(model, str(t.input_tokens), str(t.output_tokens), str(t.total_tokens))
    console.print(table)


def _render_pools(console: Console, pools: list[PoolStatus]) -> None:
    table = Table(title="subagent pools")
    for col in ("skill", "pool", "replicas", "running", "waiting", "queue wait p50", "nodes"):
        table.add_column(col)
    for p in pools:
        table.add_row(p.skill, p.pool, str(p.replicas), str(p.running), str(p.waiting),
                      f"{p.queue_wait_p50_s * 1000:.1f} ms", str(len(p.nodes)))
    console.print(table)
