"""``soloist ui``: serve the runs page (read-only unless ``--allow-actions``)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from rich.console import Console
from rich.markup import escape

from cluster.cli.ui.exceptions import UnsafeBind
from cluster.cli.ui.security import TOKEN_ENV
from cluster.cli.ui.server import DEFAULT_PORT, UiServer
from cluster.cli.ui.source import RunSource
from cluster import connect
from cluster.storage import is_postgres_url

__all__ = ["add_ui_command", "start_run_page"]

EXIT_OK, EXIT_USAGE = 0, 2


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535 (0: any free port), got {value}")
    return value


def add_ui_command(sub: Any, *, add_connection_args: Any) -> None:
    ui = sub.add_parser(
        "ui", help="serve a web page of the runs: watch them live, read their history, answer approvals",
        description="Serve the runs page on 127.0.0.1. Read-only unless --allow-actions; actions then need the "
        "token printed here (or $SOLOIST_UI_TOKEN).",
    )
    ui.add_argument("--store", default=None, metavar="STORE",
                    help="a run store (a SQLite file or a postgresql:// URL): its runs are listed too")
    ui.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"the page's port (default: {DEFAULT_PORT}; 0: any free port)")
    ui.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1, loopback)")
    ui.add_argument("--i-know-this-is-public", dest="public_ok", action="store_true",
                    help="allow a --host other than loopback (anyone who reaches the port can read every run)")
    ui.add_argument("--allow-actions", action="store_true",
                    help="allow approving/rejecting interrupts and forking from the page (token-protected)")
    add_connection_args(ui)
    ui.set_defaults(handler=_cmd_ui)


def _cmd_ui(args: argparse.Namespace, out: Console, err: Console) -> int:
    if args.store is not None and not is_postgres_url(args.store) and not os.path.exists(args.store):
        err.print(f"[red]soloist ui: no store at {escape(repr(args.store))}[/]")
        return EXIT_USAGE
    try:
        server = UiServer(RunSource(store=args.store), host=args.host, port=args.port,
                          allow_actions=args.allow_actions, public_ok=args.public_ok)
    except (UnsafeBind, OSError) as exc:
        err.print(f"[red]soloist ui: {escape(str(exc))}[/]")
        return EXIT_USAGE
    if server.warning:
        err.print(f"[yellow]{escape(server.warning)}[/]")
    connect(args.address, code_from_cwd=False)
    out.print(f"soloist ui: {server.url}", highlight=False)
    if server.token is not None:
        where = f"from ${TOKEN_ENV}" if server.guard.token_from_env else "shown once"
        out.print(f"actions allowed; token ({where}): {server.token if not server.guard.token_from_env else '(set)'}",
                  highlight=False)
        if not server.guard.token_from_env:
            out.print(f"open {server.url}#token={server.token} to act from the page", highlight=False)
    else:
        out.print("read-only (start with --allow-actions to answer interrupts and fork)", highlight=False)
    try:
        server.serve_forever()
    finally:
        server.close()
    return EXIT_OK


def start_run_page(name: str, out: Console, *, owner: Any = None, store: str | None = None) -> Any:
    """``soloist run --ui``: serve the page from this process (read-only) and print the run's URL."""
    source = RunSource(store=store)
    if owner is not None:
        source.add_owner(owner)
    try:
        server = UiServer(source, port=DEFAULT_PORT).start()
    except OSError:  # the default port is taken (another page server): any free port
        server = UiServer(source, port=0).start()
    out.print(f"soloist ui: watch this run at {server.run_url(name)}", highlight=False)
    return server
