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

__all__ = ["LiveProgress", "render_report"]


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
    imports = summary.get("imports", [])
    if imports:
        table = Table(title="Import edges involved")
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
        f"({outcome.handoff_errors} failed), version {outcome.version}, {outcome.wall_seconds:.1f}s[/]"
    )


def _confidence(event: RunEvent) -> str:
    return "-" if event.confidence is None else f"{event.confidence:.2f}"
