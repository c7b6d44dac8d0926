"""Rendering a run for people: live progress while it runs, a report when it ends."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from actors import RunEvent
from cluster.cli.explore import ExplorationRun

__all__ = ["LiveProgress", "render_report", "timing_line"]


class LiveProgress:
    """A one-panel live view of a run: turn, stage, coordinator, handoffs, confidence.

    On a terminal the panel redraws in place; elsewhere (CI logs, pipes) each event is one
    plain line, so progress stays readable and greppable.
    """

    def __init__(self, console: Console, task: str) -> None:
        self._console = console
        self._task = task
        self._live = Live(self._render(None), console=console, refresh_per_second=8, transient=False) if console.is_terminal else None

    def __enter__(self) -> "LiveProgress":
        if self._live is not None:
            self._live.__enter__()
        else:
            self._console.print(f"soloist run: {self._task}", markup=False, highlight=False)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def update(self, event: RunEvent) -> None:
        if self._live is not None:
            self._live.update(self._render(event))
            return
        self._console.print(
            f"turn {event.turn} | stage {event.stage} | {event.coordinator} | in flight {event.handoffs_in_flight} | "
            f"handoffs {event.handoffs_total} | confidence {_confidence(event)} | version {event.version}",
            markup=False, highlight=False, soft_wrap=True,
        )

    def _render(self, event: RunEvent | None) -> Panel:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan")
        table.add_column()
        if event is None:
            table.add_row("status", "starting Ray and the run's actors...")
        else:
            table.add_row("turn", str(event.turn))
            table.add_row("stage", event.stage)
            table.add_row("coordinator", event.coordinator)
            table.add_row("handoffs in flight", str(event.handoffs_in_flight))
            table.add_row("handoffs done", str(event.handoffs_total))
            table.add_row("confidence", _confidence(event))
            table.add_row("version", str(event.version))
            if event.reasoning:
                table.add_row("reasoning", Text(event.reasoning, overflow="fold"))
        return Panel(table, title=f"soloist run: {self._task}", border_style="cyan")


#: Above this many importers of one symbol, the report summarises (the JSON keeps them all).
MAX_IMPORTER_ROWS = 40


def _render_importers(console: Console, summary: dict[str, Any]) -> None:
    """Re-exports, then every importer of each symbol asked about (summarised when many)."""
    reexports = [r for r in summary.get("reexports", []) if r.get("public")]
    if reexports:
        table = Table(title="Re-exports (not definitions)")
        for col in ("symbol", "module", "from", "where"):
            table.add_column(col)
        for r in reexports:
            table.add_row(str(r["symbol"]), str(r["module"]), str(r["source"]), str(r["ref"]))
        console.print(table)
    rows = summary.get("importers", [])
    for symbol, count in (summary.get("importer_counts") or {}).items():
        mine = [r for r in rows if r["symbol"] == symbol]
        what = f"{symbol} or its module" if count.get("kind") == "symbol" else f"module {symbol}"
        title = f"Modules that import {what}: {count.get('count', len(mine))}" + (
            "" if count.get("complete", True) else " (incomplete: a bound stopped the search)")
        if not mine:
            console.print(f"[bold]{title}[/]")
            continue
        if len(mine) > MAX_IMPORTER_ROWS:
            top = ", ".join(f"{package} ({n})" for package, n in count.get("top_packages", []))
            console.print(f"[bold]{title}[/]; top packages: {top}")
            console.print(f"[dim]the first {MAX_IMPORTER_ROWS // 2} below; every importer is in the output of --json[/]")
            mine, title = mine[: MAX_IMPORTER_ROWS // 2], ""
        table = Table(title=title or None)
        for col in ("importer", "imports", "where", "how"):
            table.add_column(col)
        for r in mine:
            how = r["how"] + (" (conditional)" if r.get("conditional") else "") + (" (in a function)" if r.get("local") else "")
            table.add_row(str(r["importer"]), str(r["imported"]), str(r["ref"]), how)
        console.print(table)


def render_report(console: Console, run: ExplorationRun) -> None:
    """The final report: headline, definitions, import edges, blocked calls, the trail."""
    outcome = run.outcome
    summary: dict[str, Any] = outcome.state.get("summary") or {}
    style = "green" if outcome.status == "complete" else "yellow"
    console.print(Panel(
        Group(*[Text(f"• {line}") for line in summary.get("headline", [])] or [Text("no summary was written")]),
        title=f"[{style}]{outcome.status}[/]: {outcome.reason}", border_style=style,
    ))
    definitions = summary.get("definitions", [])
    if definitions:
        table = Table(title="Definitions", show_lines=False)
        for col in ("symbol", "kind", "where", "line"):
            table.add_column(col)
        for d in definitions:
            table.add_row(str(d["symbol"]), str(d["kind"]), str(d["ref"]), Text(str(d["text"]).strip(), overflow="ellipsis"))
        console.print(table)
    _render_importers(console, summary)
    imports = summary.get("imports", [])
    if imports:
        table = Table(title="Other import edges seen")
        for col in ("importer", "imports", "where"):
            table.add_column(col)
        for e in imports:
            table.add_row(str(e["importer"]), str(e["imported"]), str(e["ref"]))
        console.print(table)
    references = summary.get("references", [])
    if references:
        table = Table(title="Other references")
        for col in ("symbol", "where", "line"):
            table.add_column(col)
        for r in references[:10]:
            table.add_row(str(r["symbol"]), str(r["ref"]), Text(str(r["text"]).strip(), overflow="ellipsis"))
        console.print(table)
    blocked = summary.get("blocked") or outcome.state.get("blocked") or []
    if blocked:
        table = Table(title="Blocked by safety")
        table.add_column("tool")
        table.add_column("reason")
        for b in blocked:
            table.add_row(str(b.get("tool_name")), str(b.get("reason")))
        console.print(table)
    trail = summary.get("trail") or outcome.state.get("trail") or []
    if trail:
        table = Table(title="Reasoning trail")
        table.add_column("#", justify="right")
        table.add_column("coordinator")
        table.add_column("reasoning")
        for i, step in enumerate(trail, 1):
            table.add_row(str(i), str(step.get("coordinator")), Text(str(step.get("reasoning")), overflow="fold"))
        console.print(table)
    console.print(
        f"[dim]run {run.run}: {outcome.turns} turns, {outcome.handoffs} handoffs "
        f"({outcome.handoff_errors} failed), version {outcome.version}[/]"
    )
    console.print(f"[dim]{timing_line(run)}[/]")


def timing_line(run: ExplorationRun) -> str:
    """Start-up and run times, and how the run reached Ray (the report's last line)."""
    how = {
        "embedded": "started an embedded Ray (run `soloist up` once to skip this)",
        "soloist up": f"joined the local cluster of `soloist up` at {run.cluster_address}",
        "address": f"joined {run.cluster_address}",
    }.get(run.cluster or "", "")
    startup = f"start-up {run.startup_seconds:.1f}s" if run.startup_seconds is not None else "start-up not measured"
    return f"{startup}, run {run.outcome.wall_seconds:.1f}s" + (f"; {how}" if how else "")


def _confidence(event: RunEvent) -> str:
    return "-" if event.confidence is None else f"{event.confidence:.2f}"
