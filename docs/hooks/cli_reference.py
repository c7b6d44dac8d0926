"""MkDocs hook: renders the ``soloist`` command line's help into docs/reference/cli.md.

The page holds a ``<!-- soloist-cli-reference -->`` marker; at build time it is replaced by
``soloist --help`` and the ``--help`` of every subcommand, taken from ``cluster.cli.build_parser``,
so the reference cannot drift from the parsers.
"""

from __future__ import annotations

import argparse
import os

MARKER = "<!-- soloist-cli-reference -->"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public accessor for its subparsers
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(parser: argparse.ArgumentParser) -> str:
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; a fixed width keeps the page stable
    try:
        return parser.format_help()
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous


def render() -> str:
    from cluster.cli import build_parser

    parser = build_parser()
    parts = ["## `soloist`", "", "```text", _help(parser).rstrip(), "```", ""]
    for name, sub in _subcommands(parser).items():
        parts += [f"## `soloist {name}`", "", "```text", _help(sub).rstrip(), "```", ""]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 (MkDocs' hook signature)
    if MARKER in markdown:
        return markdown.replace(MARKER, render())
    return markdown
