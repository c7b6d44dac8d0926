"""``soloist approve | history | fork | gc`` and ``soloist run --resume``: thin shells over
``Orchestrator.answer/history/fork``, ``Run.restore(...).resume()`` and the store's gc.

Each command works on a stored run (``--store``). A run has one writer, so a command never
writes a run as a second writer: when the run is live on the connected cluster the command
borrows its orchestrator (and leaves the run going when done); when no driver holds it, the
command restarts its orchestrator from the store and stops it again; when another process
on another cluster has it open, the command is refused with ``RunLockedElsewhere``, whose
message names that cluster's address to pass as ``--address``. ``history`` only reads: a run
that is not live here is read straight from the store, without starting anything.
Exit codes: 0 done, 1 refused or failed (the reason is printed), 2 bad arguments,
3 the resumed run waits for approval again.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
from typing import Any, get_args

from rich.console import Console

from actors import Change, HistoryCompacted, InterruptNotOpen, Orchestrator, answer_interrupt, open_interrupts
from cluster.cli.explore import resume_run
from cluster.cli.report import LiveProgress, render_report
from cluster import connect
from cluster.storage import FinalStatus, RunLockedElsewhere, is_postgres_url, open_store, parse_age, redact, remove_finished_runs

__all__ = ["add_run_commands", "resume_command", "EXIT_WAITING"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_WAITING = 0, 1, 2, 3


def _version(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a version number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a version is >= 0, got {value}")
    return value


def add_run_commands(sub: Any, add_connection_args: Any) -> None:
    """Register approve, history, fork and gc on the ``soloist`` parser."""
    approve = sub.add_parser(
        "approve", help="answer one open interrupt of a stored run (approve, or --reject)",
        description="Answer the interrupt ID of RUN: approve it (default) or --reject it with --reason. "
        "The run moves on when it is resumed: soloist run --resume RUN --store PATH.",
    )
    approve.add_argument("run", help="the run's name")
    approve.add_argument("interrupt", metavar="ID", nargs="?", default=None,
                         help="the interrupt's id (as printed by soloist run); omit it to list the open interrupts")
    approve.add_argument("--store", required=True, metavar="STORE", help="the run's store (a SQLite file or a postgresql:// URL)")
    approve.add_argument("--reject", action="store_true", help="reject instead of approving")
    approve.add_argument("--reason", default=None, help="why (recorded with the answer; given to rejected tool calls)")
    add_connection_args(approve)
    approve.set_defaults(handler=_cmd_approve)

    history = sub.add_parser(
        "history", help="list the committed versions of a stored run and what changed",
        description="Print every committed version of RUN after --since (up to --until): its kind, time, and "
        "transitions (or the size of its state diff). Versions older than the retention window are refused, "
        "naming the earliest version still kept.",
    )
    history.add_argument("run", help="the run's name")
    history.add_argument("--store", required=True, metavar="STORE", help="the run's store (a SQLite file or a postgresql:// URL)")
    history.add_argument("--since", type=_version, default=0, help="list versions after this one (default: 0)")
    history.add_argument("--until", type=_version, default=None, help="up to this version (default: the last)")
    history.add_argument("--json", action="store_true", help="one JSON object per version")
    add_connection_args(history)
    history.set_defaults(handler=_cmd_history)

    fork = sub.add_parser(
        "fork", help="start a new run from the state of a stored run at a version",
        description="Create run NEW whose state is exactly RUN's state at version --at. RUN and its journal are "
        "untouched; the two runs are independent from then on. Continue NEW with soloist run --resume NEW.",
    )
    fork.add_argument("run", help="the run to fork")
    fork.add_argument("--at", type=_version, required=True, metavar="N", help="the version to fork at")
    fork.add_argument("--name", required=True, metavar="NEW", help="the new run's name")
    fork.add_argument("--store", required=True, metavar="STORE", help="the run's store (a SQLite file or a postgresql:// URL)")
    fork.add_argument("--to-store", default=None, metavar="STORE", help="store the new run here (default: --store)")
    add_connection_args(fork)
    fork.set_defaults(handler=_cmd_fork)

    gc = sub.add_parser(
        "gc", help="remove finished runs from a store",
        description=f"Delete every run of the store that finished ({', '.join(get_args(FinalStatus))}) "
        "more than --older-than ago. Runs that wait for approval, and runs never driven by a Run, are kept.",
    )
    gc.add_argument("--store", required=True, metavar="STORE", help="the store (a SQLite file or a postgresql:// URL)")
    gc.add_argument("--older-than", required=True, metavar="AGE", help="e.g. 7d, 12h, 30m, 0s")
    gc.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    gc.add_argument("--json", action="store_true", help="print the report as JSON")
    gc.set_defaults(handler=_cmd_gc, log_format="text", log_level="WARNING")  # no cluster, no log options


def _missing_store(path: str, command: str, err: Console) -> bool:
    """A store file that is not there (a database URL is checked when it is opened)."""
    if not is_postgres_url(path) and not os.path.exists(path):
        err.print(f"[red]soloist {command}: no store at {path!r}[/]")
        return True
    return False


def _connect(args: argparse.Namespace) -> None:
    connect(args.address, code_from_cwd=False)


def _refused(command: str, exc: RunLockedElsewhere, err: Console) -> int:
    """A run open for writing in another process (another cluster): say how to reach it."""
    err.print(f"soloist {command}: {exc}", soft_wrap=True, markup=False, highlight=False, style="red")
    return EXIT_FAILED


def _stored_history(path: str, name: str, since: int, until: int | None) -> list[Change]:
    """The committed changes of a stored run, read from the store alone (nothing is started
    and nothing is written, so a run that another process drives is safe to read)."""
    store = open_store(path)
    try:
        if store.get_run(name) is None:
            raise ValueError(f"no run named {name!r} in {path}")
        checkpoint, tail = store.load(name)
        last = tail[-1].version if tail else checkpoint.version
        until = last if until is None else until
        if until > last:
            raise ValueError(f"history(until={until}): run {name!r} is at version {last}")
        if since >= until:
            return []
        oldest = store.oldest_version(name)
        if since < oldest:
            raise HistoryCompacted(name, since, oldest)
        return [Change.of_entry(entry) for entry in store.entries(name, since, until)]
    finally:
        store.close()



def _live_here(name: str) -> bool:
    """True when the run's orchestrator is alive on the connected cluster."""
    return name in Orchestrator.list_live()


def _cmd_approve(args: argparse.Namespace, out: Console, err: Console) -> int:
    if _missing_store(args.store, "approve", err):
        return EXIT_USAGE
    if args.reason is not None and args.interrupt is None:
        err.print("[red]soloist approve: --reason needs an interrupt ID[/]")
        return EXIT_USAGE
    _connect(args)

    async def go() -> int:
        try:
            orch = Orchestrator.attach(args.run, store=args.store)  # borrows a live run, never a second writer
        except RunLockedElsewhere as exc:
            return _refused("approve", exc, err)
        try:
            if args.interrupt is None:
                open_ = await open_interrupts(orch)
                for i in open_:
                    out.print(f"{i.id}\t{i.kind}\t{i.coordinator}\t{json.dumps(i.question)}", soft_wrap=True)
                if not open_:
                    out.print(f"run {args.run} has no open interrupts")
                return EXIT_OK
            try:
                version = await answer_interrupt(orch, args.interrupt, approve=not args.reject, reason=args.reason)
            except InterruptNotOpen as exc:
                err.print(f"[red]soloist approve: {exc}[/]")
                return EXIT_FAILED
            left = await open_interrupts(orch)
            verb = "rejected" if args.reject else "approved"
            out.print(f"{verb} {args.interrupt} (version {version}); {len(left)} interrupt(s) still open")
            if not left:
                out.print(f"resume with: soloist run --resume {args.run} --store {redact(args.store)}")
            return EXIT_OK
        finally:
            await orch.close()

    return asyncio.run(go())


def _cmd_history(args: argparse.Namespace, out: Console, err: Console) -> int:
    if _missing_store(args.store, "history", err):
        return EXIT_USAGE
    joining = bool(args.address or os.environ.get("RAY_ADDRESS"))
    if joining:  # a run live on that cluster is read from its orchestrator (what it has committed)
        _connect(args)

    async def go() -> int:
        try:
            if joining and _live_here(args.run):
                orch = Orchestrator.attach(args.run)  # read-only, borrowed: closing it leaves the run going
                try:
                    changes = await orch.history(since=args.since, until=args.until)
                finally:
                    await orch.close()
            else:
                changes = await asyncio.to_thread(_stored_history, args.store, args.run, args.since, args.until)
        except (HistoryCompacted, ValueError) as exc:
            err.print(f"[red]soloist history: {exc}[/]")
            return EXIT_FAILED
        for change in changes:
            if args.json:
                out.print(change.model_dump_json(exclude={"seq", "agent"}), soft_wrap=True, markup=False, highlight=False)
                continue
            at = datetime.datetime.fromtimestamp(change.at, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
            if change.transitions is not None:
                what = ", ".join(t.transition_type.value for t in change.transitions) or "(empty batch)"
            else:
                what = f"fn: {len(change.diff or [])} change(s) to the state"
            out.print(f"{change.version}\t{at}\t{change.kind}\t{what}", soft_wrap=True, markup=False, highlight=False)
        return EXIT_OK

    return asyncio.run(go())


def _cmd_fork(args: argparse.Namespace, out: Console, err: Console) -> int:
    if _missing_store(args.store, "fork", err):
        return EXIT_USAGE
    _connect(args)

    async def go() -> int:
        try:
            # Forking only reads the run: borrow a live one read-only; restart one nobody drives.
            orch = Orchestrator.attach(args.run) if _live_here(args.run) else Orchestrator.attach(args.run, store=args.store)
        except RunLockedElsewhere as exc:
            return _refused("fork", exc, err)
        try:
            try:
                fork = await orch.fork(args.name, at_version=args.at, store=args.to_store or args.store)
            except (HistoryCompacted, ValueError) as exc:
                err.print(f"[red]soloist fork: {exc}[/]")
                return EXIT_FAILED
            await fork.close()
        finally:
            await orch.close()
        out.print(f"forked {args.run} at version {args.at} as {args.name} in {redact(args.to_store or args.store)}")
        return EXIT_OK

    return asyncio.run(go())


def _cmd_gc(args: argparse.Namespace, out: Console, err: Console) -> int:
    try:
        age = parse_age(args.older_than)
    except ValueError as exc:
        err.print(f"[red]soloist gc: --older-than: {exc}[/]")
        return EXIT_USAGE
    if _missing_store(args.store, "gc", err):
        return EXIT_USAGE
    store = open_store(args.store)
    try:
        report = remove_finished_runs(store, age, dry_run=args.dry_run)
    finally:
        store.close()
    if args.json:
        out.print_json(report.model_dump_json())
    else:
        verb = "would remove" if args.dry_run else "removed"
        values = f"; {report.values_removed} stored value(s) no run refers to" if report.values_removed else ""
        out.print(f"{verb} {len(report.removed)} finished run(s): {', '.join(report.removed) or '-'}; kept {len(report.kept)}"
                  f"{values}")
    return EXIT_OK


def resume_command(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``soloist run --resume RUN --store PATH``: continue a stored run where it stopped."""

    if args.store is None:
        err.print("[red]soloist run --resume: pass --store PATH (the run's store)[/]")
        return EXIT_USAGE
    if _missing_store(args.store, "run --resume", err):
        return EXIT_USAGE
    _connect(args)

    async def go() -> int:
        progress = LiveProgress(err, f"resuming {args.resume}")
        try:
            with progress:
                run = await resume_run(args.resume, args.store, durability=args.durability, on_event=progress.update,
                                       max_turns=args.max_turns_given)
        except RunLockedElsewhere as exc:
            return _refused("run --resume", exc, err)
        if args.json:
            out.print_json(run.model_dump_json())
        else:
            render_report(out, run)
        return report_waiting(run.outcome, run.run, args.store, err)

    return asyncio.run(go())


def report_waiting(outcome: Any, run: str, store: str | None, err: Console) -> int:
    """The exit code of a run's outcome; a waiting run prints how to answer it."""
    if outcome.status == "waiting":
        err.print(f"[yellow]soloist run: run {run} waits for approval:[/]")
        for i in outcome.interrupts:
            err.print(f"  {i.id}: {json.dumps(i.question)}", soft_wrap=True, markup=False, highlight=False)
        where = f" --store {redact(store)}" if store else ""
        err.print(f"answer each with: soloist approve {run} ID{where} [--reject --reason TEXT]; then: "
                  f"soloist run --resume {run}{where}", markup=False, highlight=False)
        return EXIT_WAITING
    if outcome.status == "cancelled":
        return 130
    if outcome.status != "complete":
        err.print(f"[yellow]soloist run: the run did not complete: {outcome.reason}[/]")
        return EXIT_FAILED
    return EXIT_OK
