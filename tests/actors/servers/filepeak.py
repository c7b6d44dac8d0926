"""A peak-in-flight counter in a file, shared by Ray workers and MCP server processes on one machine.

The work under test runs in different kinds of processes (subagent actors, MCP servers the
test did not start as Ray actors), so the counter is a JSON file updated under ``flock``.
"""

from __future__ import annotations

import fcntl
import json
import os
from typing import Any


class FilePeak:
    """``enter``/``exit`` around a unit of work; ``report`` gives current, peak and finished."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _update(self, fn: Any) -> dict[str, Any]:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.read(fd, 4096)
            state = json.loads(raw) if raw else {"current": 0, "peak": 0, "finished": 0, "pids": []}
            fn(state)
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps(state).encode())
            return state
        finally:
            os.close(fd)  # releases the lock

    def enter(self) -> None:
        """Count one more unit of work in flight, and remember which process runs it."""

        def go(s: dict[str, Any]) -> None:
            s["pids"] = sorted(set(s["pids"]) | {os.getpid()})
            s["current"] += 1
            s["peak"] = max(s["peak"], s["current"])

        self._update(go)

    def exit(self) -> None:
        def go(s: dict[str, Any]) -> None:
            s["current"] -= 1
            s["finished"] += 1

        self._update(go)

    def report(self) -> dict[str, Any]:
        return self._update(lambda s: None)
