"""``soloist``: the command line, a thin shell over the library.

Exit codes: 0 the run completed, 1 it failed or stopped early (the reason is printed),
2 bad arguments, 3 the run waits for approval (soloist approve, then soloist run --resume),
130 interrupted (Ctrl-C: in-flight handoffs are cancelled first).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from actors.callers.llm import LlmConfig, LlmConfigError
from cluster.cli.bench import add_bench_command
from cluster.cli.explore import explore
from cluster.cli.report import LiveProgress, render_report
from cluster.cli.runs import add_run_commands, report_waiting, resume_command
from cluster.cli.status import collect_status, render_status
from cluster.cli.ui import add_ui_command, start_run_page
from cluster.connect import connect
from cluster.logs import configure_logging
from cluster.metrics import serve_metrics

__all__ = ["main", "build_parser"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def _port(text: str) -> int:
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is at most 65535, got {value}")
    return value


def _add_connection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="a Ray cluster to join ('auto', 'ray://host:10001', 'host:6379'); default: an embedded local Ray")
    p.add_argument("--log-format", choices=("text", "json"), default="text", help="log records as text or one JSON object per line (stderr)")
    p.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="default: WARNING")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="soloist",
        description="Multi-agent runs on Ray: one single-writer orchestrator, pure coordinators, "
        "stateless subagents, at most four handoffs in flight across the cluster.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = sub.add_parser(
        "run", help="explore a code base for a task with the four built-in coordinators",
        description="Explore ROOT for TASK: classify it, search and read the code through subagents "
        "(at most --max-parallel in flight), follow imports, and report file:line findings. Offline.",
    )
    run.add_argument("task", nargs="?", default=None, help='what to find, e.g. "where is `connect` defined and who imports it?"')
    run.add_argument("--resume", default=None, metavar="RUN",
                     help="continue the stored run RUN (with --store) exactly where it stopped, instead of a new task")
    run.add_argument("--root", default=".", help="the directory to explore (default: the current one)")
    run.add_argument("--store", default=None, metavar="PATH", help="a SQLite file to journal the run in (default: memory only)")
    run.add_argument("--durability", choices=("sync", "batch", "exit"), default="sync", help="journal mode with --store (default: sync)")
    run.add_argument("--name", default=None, help="name the run (to attach to it or find it in `soloist status`)")
    run.add_argument("--max-turns", type=_positive_int, default=None, help="stop after this many coordinator turns (default: 40)")
    run.add_argument("--max-parallel", type=int, default=4, help="handoffs in flight (<= 0 means 4; above 4 is clamped to 4)")
    run.add_argument("--json", action="store_true", help="print the outcome as JSON on stdout instead of the report")
    run.add_argument("--ui", action="store_true", help="serve the run's web page from this process and print its URL")
    run.add_argument("--metrics-port", type=_port, default=None, metavar="PORT", help="serve Prometheus metrics on http://0.0.0.0:PORT/metrics")
    run.add_argument("--provider", choices=("offline", "openai-compatible"), default="offline",
                     help="offline (default): rules only; openai-compatible: a model classifies the task and narrates the summary")
    run.add_argument("--base-url", default=None, metavar="URL",
                     help="the chat-completions endpoint, e.g. http://localhost:11434/v1 (default: $SOLOIST_LLM_BASE_URL)")
    run.add_argument("--model", default=None, metavar="NAME", help="the model name (default: $SOLOIST_LLM_MODEL); the key is read from $OPENAI_API_KEY")
    _add_connection_args(run)
    run.set_defaults(handler=_cmd_run)

    status = sub.add_parser("status", help="list runs: their versions and their agents",
                            description="List the runs in a store (--store) and the live orchestrators of a cluster (--address).")
    status.add_argument("--store", default=None, metavar="PATH", help="a run store (SQLite file)")
    status.add_argument("--json", action="store_true", help="print JSON instead of tables")
    _add_connection_args(status)
    status.set_defaults(handler=_cmd_status)

    add_run_commands(sub, _add_connection_args)
    _add_optional_commands(sub)
    return parser


def _add_optional_commands(sub: Any) -> None:
    """Commands that live in their own modules (the runs page, benchmarks)."""
    add_ui_command(sub, add_connection_args=_add_connection_args)
    add_bench_command(sub)


def _cmd_run(args: argparse.Namespace, out: Console, err: Console) -> int:
    args.max_turns_given = args.max_turns
    if args.resume is not None:
        if args.task is not None:
            err.print("[red]soloist run: give a TASK or --resume RUN, not both[/]")
            return EXIT_USAGE
        return resume_command(args, out, err)
    if args.task is None or not args.task.strip():
        err.print("[red]soloist run: the task is empty; say what to look for[/]")
        return EXIT_USAGE
    if not os.path.isdir(args.root):
        err.print(f"[red]soloist run: --root {args.root!r} is not a directory[/]")
        return EXIT_USAGE
    llm = None
    if args.provider == "openai-compatible":
        try:
            llm = LlmConfig.from_env(base_url=args.base_url, model=args.model)
        except LlmConfigError as exc:
            err.print(f"[red]soloist run: {exc}[/]")
            return EXIT_USAGE
    connect(args.address, code_from_cwd=False)  # the current directory may be the (untrusted) repository explored
    if args.metrics_port is not None:
        serve_metrics(args.metrics_port)

    name = args.name
    page = None
    if args.ui:
        name = name or f"run-{uuid.uuid4().hex[:12]}"
        page = start_run_page(name, err, store=args.store)

    async def go() -> int:
        progress = LiveProgress(err, args.task)
        with progress:
            run = await explore(args.task, args.root, name=name, store=args.store, durability=args.durability,
                                max_turns=args.max_turns or 40, max_parallel=args.max_parallel, on_event=progress.update,
                                llm=llm)
        if args.json:
            out.print_json(run.model_dump_json())
        else:
            render_report(out, run)
        return report_waiting(run.outcome, run.run, args.store, err)

    try:
        return asyncio.run(go())
    finally:
        if page is not None:
            page.close()


def _cmd_status(args: argparse.Namespace, out: Console, err: Console) -> int:
    if args.store is None and args.address is None:
        err.print("[red]soloist status: pass --store PATH (stored runs) and/or --address ADDR (live runs)[/]")
        return EXIT_USAGE
    if args.store is not None and not os.path.exists(args.store):
        err.print(f"[red]soloist status: no store at {args.store!r}[/]")
        return EXIT_USAGE
    report = collect_status(store=args.store, address=args.address)
    if args.json:
        out.print_json(report.model_dump_json())
    else:
        render_status(out, report)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``soloist`` command; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    configure_logging(args.log_format, args.log_level)
    out = Console(soft_wrap=False)
    err = Console(stderr=True)
    try:
        return args.handler(args, out, err)
    except KeyboardInterrupt:
        err.print("[yellow]soloist: interrupted; in-flight handoffs were cancelled and the committed state is consistent[/]")
        return EXIT_INTERRUPTED
    except Exception as exc:  # the reason is the product here: report it, exit 1
        err.print(f"[red]soloist {args.command} failed: {type(exc).__name__}: {exc}[/]")
        return EXIT_FAILED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
