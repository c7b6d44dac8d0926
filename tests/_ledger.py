"""The ledger lines that skill bodies write from their own processes (exactly-once, cap and
placement counts): one ``write`` with ``O_APPEND`` per line, so lines of concurrent bodies
never interleave, fsynced before the body goes on."""

from __future__ import annotations

import os

__all__ = ["append_line"]


def append_line(path: str, line: str) -> None:
    """Append ``line`` and a newline to ``path``, durably."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
