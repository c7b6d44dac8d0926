"""Keep stdout for one JSON document: everything else written to it goes to stderr.

``soloist run --json | jq`` must see exactly one document. Ray prints on the driver's stdout
from places soloist does not control: the worker-log forwarder (``(raylet) WARNING: 8 PYTHON
worker processes have been started...``), C++ code writing to file descriptor 1, and the
processes of an embedded Ray, which inherit the driver's descriptors when they start.
Turning ``log_to_driver`` off would hide those lines instead of moving them, and would not
cover the C++ writes; so the guard works at the descriptor level: while it is active, fd 1
*is* stderr, for this process and for every process it starts. The document is written to
the real stdout, saved aside, once the work (and Ray) is done.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["stdout_reserved"]


class _Reserved:
    """Writes the document to the stdout that was set aside."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        self.written = False

    def write_document(self, text: str) -> None:
        if self.written:
            raise RuntimeError("the JSON document was already written; stdout holds exactly one")
        self.written = True
        data = text if text.endswith("\n") else text + "\n"
        if self._fd is None:  # not a real stdout (an in-process caller replaced sys.stdout)
            sys.stdout.write(data)
            sys.stdout.flush()
            return
        with os.fdopen(os.dup(self._fd), "w", encoding="utf-8") as real:
            real.write(data)
            real.flush()


@contextmanager
def stdout_reserved(active: bool = True) -> Iterator[_Reserved]:
    """Within the block, fd 1 and ``sys.stdout`` point at stderr; ``write_document`` writes to
    the real stdout. The real stdout comes back at the end of the block."""
    if not active:
        yield _Reserved(None)
        return
    try:
        real_fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # captured or replaced: nothing at fd level to guard
        yield _Reserved(None)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(real_fd)
    python_stdout = sys.stdout
    os.dup2(sys.stderr.fileno(), real_fd)
    sys.stdout = sys.stderr
    try:
        yield _Reserved(saved)
    finally:
        sys.stdout = python_stdout
        try:
            python_stdout.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, real_fd)
        os.close(saved)
