"""Shared helpers of the reliability suite: sizes, the full-run switch, log capture, secret scans."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: ``SOLOIST_RELIABILITY_FULL=1`` runs the long versions (e.g. 16 writers x 1,000 applies);
#: the default is a bounded run that keeps the suite inside CI's time budget.
FULL = os.environ.get("SOLOIST_RELIABILITY_FULL", "") not in ("", "0")


def scaled(bounded: int, full: int) -> int:
    """``full`` under ``SOLOIST_RELIABILITY_FULL=1``, else ``bounded``."""
    return full if FULL else bounded


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        extra = {k: v for k, v in record.__dict__.items() if k not in logging.LogRecord("", 0, "", 0, "", (), None).__dict__}
        self.lines.append(f"{record.getMessage()} {extra!r}")


@contextmanager
def captured_logs() -> Iterator[list[str]]:
    """Every record logged in this process while the block runs, message and extras rendered."""
    handler = _Collect()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler.lines
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


def files_containing(directory: Path, needle: str) -> list[str]:
    """Files under ``directory`` whose bytes contain ``needle`` (logs, spill files, ...)."""
    raw = needle.encode()
    found = []
    for path in directory.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and raw in path.read_bytes():
                found.append(str(path))
        except OSError:
            continue  # a socket or a file removed while we walked
    return found
