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
import time
import uuid
from collections.abc import Sequence
from typing import Any

import ray
from rich.console import Console

from actors import DEFAULT_MAX_PARALLEL, HARD_MAX_PARALLEL, LlmConfig, LlmConfigError
from cluster.cli.bench import add_bench_command, run_bench
from cluster.cli.json_stdout import stdout_reserved
from cluster.local_cluster import joinable, local_cluster, record_path, start_local_cluster, stop_local_cluster
from cluster.cli.explore import explore
from cluster.cli.report import LiveProgress, render_report
from cluster.cli.runs import add_run_commands, report_waiting, resume_command
from cluster.cli.run_index import DEFAULT_LIMIT, RUN_STATUSES
from cluster.cli.status import collect_status, render_status
from cluster.cli.ui import add_ui_command, start_run_page
from cluster import configure_logging, connect
from cluster.metrics import serve_metrics
from cluster.storage import is_postgres_url

__all__ = ["main", "build_parser"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: ``soloist status`` with no arguments lists the runs stored here when the file exists.
_DEFAULT_STORE = "runs.sqlite"


def _int_at_least(low: int, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected a number >= {low}, got {value}")
    return value


def _positive_int(text: str) -> int:
    return _int_at_least(1, text)


def _non_negative_int(text: str) -> int:
    return _int_at_least(0, text)


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
    run.add_argument("--store", default=None, metavar="STORE",
                     help="a SQLite file or a postgresql:// URL to journal the run in (default: memory only)")
    run.add_argument("--durability", choices=("sync", "batch", "exit"), default=None,
                     help="journal mode with --store (default: sync for a new run; with --resume, the mode the run was created with)")
    run.add_argument("--name", default=None, help="name the run (to attach to it or find it in `soloist status`)")
    run.add_argument("--max-turns", type=_positive_int, default=None, help="stop after this many coordinator turns (default: 40)")
    run.add_argument("--max-parallel", type=int, default=DEFAULT_MAX_PARALLEL,
                     help=f"handoffs in flight (<= 0 means {DEFAULT_MAX_PARALLEL}; above {HARD_MAX_PARALLEL} is clamped "
                          f"to {HARD_MAX_PARALLEL})")
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
                            description="List the runs in a store (--store) and the live orchestrators of a cluster (--address), "
                            "a page at a time (--offset, --limit, --status), with the count of every run by status and, "
                            "on a cluster, its run hosts. Without either: the live runs of the cluster `soloist up` started, "
                            "and the runs stored in ./runs.sqlite when that file exists.")
    status.add_argument("--store", default=None, metavar="STORE", help="a run store (a SQLite file or a postgresql:// URL)")
    status.add_argument("--json", action="store_true", help="print JSON instead of tables")
    status.add_argument("--limit", type=_positive_int, default=DEFAULT_LIMIT, metavar="N",
                        help=f"show at most N runs (default: {DEFAULT_LIMIT}); only those are read in full")
    status.add_argument("--offset", type=_non_negative_int, default=0, metavar="N", help="skip the first N runs (default: 0)")
    status.add_argument("--status", default=None, choices=RUN_STATUSES, metavar="STATUS",
                        help=f"only runs whose driver recorded this status: {', '.join(RUN_STATUSES)} "
                        "(none: no status recorded, e.g. a plain orchestrator)")
    _add_connection_args(status)
    status.set_defaults(handler=_cmd_status)

    add_run_commands(sub, _add_connection_args)

    up = sub.add_parser("up", help="start a local Ray cluster that `soloist run` joins (skips Ray's start-up on every run)",
                        description="Start a local Ray cluster for soloist and record it; `soloist run` and `soloist status` "
                        "join it while it runs. `soloist down` stops it (and only it).")
    up.add_argument("--num-cpus", type=_positive_int, default=None, help="CPUs the cluster offers (default: this machine's, at least 2)")
    up.add_argument("--log-format", choices=("text", "json"), default="text", help="log records as text or one JSON object per line (stderr)")
    up.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="default: WARNING")
    up.set_defaults(handler=_cmd_up)

    down = sub.add_parser("down", help="stop the local cluster that `soloist up` started (no other)",
                          description="Stop the cluster recorded by `soloist up`; clusters started otherwise are never touched.")
    down.add_argument("--log-format", choices=("text", "json"), default="text", help="log records as text or one JSON object per line (stderr)")
    down.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="default: WARNING")
    down.set_defaults(handler=_cmd_down)

    _add_optional_commands(sub)
    return parser


def _add_optional_commands(sub: Any) -> None:
    """Commands that live in their own modules (the runs page, benchmarks)."""
    add_ui_command(sub, add_connection_args=_add_connection_args)
    add_bench_command(sub)


def _cmd_run(args: argparse.Namespace, out: Console, err: Console) -> int:
    started = time.perf_counter()
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
    # With --json, stdout holds the document alone: Ray's output (worker-log forwarding, its
    # C++ code, the processes of an embedded Ray) goes to stderr, at the descriptor level.
    with stdout_reserved(args.json) as reserved:
        was_connected = ray.is_initialized()
        address, how = args.address, "address"
        if address is None and not os.environ.get("RAY_ADDRESS"):
            record = None if was_connected else joinable()
            address, how = (record.address, "soloist up") if record is not None else (None, "embedded")
        if how == "soloist up":
            _keep_warm_on_up_cluster()
        # the current directory may be the (untrusted) repository explored: keep it off workers' path
        info = connect(address, code_from_cwd=False)
        startup = time.perf_counter() - started
        if args.metrics_port is not None:
            serve_metrics(args.metrics_port)
        name = args.name
        page = None
        if args.ui:
            name = name or f"run-{uuid.uuid4().hex[:12]}"
            page = start_run_page(name, err, store=args.store)

        async def go() -> Any:
            progress = LiveProgress(err, args.task)
            with progress:
                return await explore(args.task, args.root, name=name, store=args.store, durability=args.durability or "sync",
                                     max_turns=args.max_turns or 40, max_parallel=args.max_parallel,
                                     on_event=progress.update, llm=llm)

        try:
            run = asyncio.run(go())
        finally:
            if page is not None:
                page.close()
            if args.json and not was_connected:
                ray.shutdown()  # nothing of Ray's may print after the document
        run = run.model_copy(update={"startup_seconds": round(startup, 3), "cluster": how, "cluster_address": info.address})
        if args.json:
            reserved.write_document(run.model_dump_json(indent=2))
        else:
            render_report(out, run)
    return report_waiting(run.outcome, run.run, args.store, err)


#: On a cluster ``soloist up`` started, what a run starts stays up this long after the run
#: (unless the variables say otherwise): its run host and the code skills' kept replica. A
#: run that comes later then finds them, instead of starting their processes (a second of a
#: core each) on its path; they retire after that as they would anywhere.
_UP_CLUSTER_KEEP_S = "600"


def _keep_warm_on_up_cluster() -> None:
    """Keep the run hosts and kept replicas this process starts for ``_UP_CLUSTER_KEEP_S``:
    ``SOLOIST_HOST_RETIRE_S`` and ``SOLOIST_REPLICA_KEEP_S`` when they are not set."""
    for variable in ("SOLOIST_HOST_RETIRE_S", "SOLOIST_REPLICA_KEEP_S"):
        os.environ.setdefault(variable, _UP_CLUSTER_KEEP_S)


def _cmd_status(args: argparse.Namespace, out: Console, err: Console) -> int:
    store, address = args.store, args.address
    if store is None and address is None:  # what runs and is stored nearby
        record = joinable()
        address = record.address if record is not None else None
        store = _DEFAULT_STORE if os.path.exists(_DEFAULT_STORE) else None
        if store is None and address is None:
            message = (f"no live runs (no cluster started by `soloist up` is running) and no {_DEFAULT_STORE} here; "
                       "pass --store PATH for stored runs or --address ADDR for the live runs of a cluster")
            if args.json:
                out.print_json(data={"store": None, "address": None, "runs": [], "total": 0, "counts": {}, "note": message})
            else:
                out.print(message, markup=False, highlight=False, soft_wrap=True)
            return EXIT_OK
    if store is not None and not is_postgres_url(store) and not os.path.exists(store):
        err.print(f"[red]soloist status: no store at {store!r}[/]")
        return EXIT_USAGE
    with stdout_reserved(args.json) as reserved:
        report = collect_status(store=store, address=address, offset=args.offset, limit=args.limit, status=args.status)
        if args.json:
            reserved.write_document(report.model_dump_json(indent=2))
        else:
            render_status(out, report)
    return EXIT_FAILED if report.store_health is not None and not report.store_health.reachable else EXIT_OK


def _cmd_up(args: argparse.Namespace, out: Console, err: Console) -> int:
    started = time.perf_counter()
    record, new = start_local_cluster(num_cpus=args.num_cpus)
    if new:
        out.print(f"started a local Ray cluster for soloist at {record.address} (pid {record.pid}, {record.num_cpus} CPUs) "
                  f"in {time.perf_counter() - started:.1f}s; `soloist run` and `soloist status` join it while it runs",
                  markup=False, highlight=False, soft_wrap=True)
    else:
        out.print(f"a local cluster started by `soloist up` is already running at {record.address} (pid {record.pid})",
                  markup=False, highlight=False, soft_wrap=True)
    out.print(f"stop it with: soloist down   (record: {record_path()})", markup=False, highlight=False, soft_wrap=True)
    return EXIT_OK


def _cmd_down(args: argparse.Namespace, out: Console, err: Console) -> int:
    before = local_cluster()
    stopped = stop_local_cluster()
    if stopped is None:
        out.print(f"no cluster started by `soloist up` is recorded ({record_path()}); nothing was stopped",
                  markup=False, highlight=False, soft_wrap=True)
    elif before is not None and before.status == "stale":
        out.print(f"the cluster recorded at {stopped.address} (pid {stopped.pid}) was no longer running; "
                  "its record was removed and nothing was signalled", markup=False, highlight=False, soft_wrap=True)
    else:
        out.print(f"stopped the local cluster at {stopped.address} (pid {stopped.pid})", markup=False, highlight=False, soft_wrap=True)
    return EXIT_OK


#: Width of tables and panels when the output is not a terminal (a pipe, a file, CI logs) and
#: COLUMNS does not say otherwise: wide enough that rows do not wrap at rich's default of 80.
_PIPE_WIDTH = 200


def _console(*, stderr: bool = False) -> Console:
    """The console of one stream: a terminal is wrapped at its width; a pipe or file gets whole
    lines (a command printed for copying stays on one line) and tables up to ``_PIPE_WIDTH``."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr, )
    return Console(stderr=stderr, soft_wrap=True, width=None if os.environ.get("COLUMNS") else _PIPE_WIDTH)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``soloist`` command; returns the exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["bench"]:  # every option of `bench` belongs to `python -m benchmarks`
        return run_bench(arguments[1:], _console(stderr=True))
    parser = build_parser()
    try:
        args = parser.parse_args(arguments)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    configure_logging(args.log_format, args.log_level)
    out, err = _console(), _console(stderr=True)
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
