"""A peak-in-flight counter in a file, shared by Ray workers and MCP server processes on one machine.

The work under test runs in different kinds of processes (subagent actors, MCP servers the
test did not start as Ray actors), so the counter is a JSON file updated under ``flock``.
Its gate is a second file: gated work waits, after ``enter``, until the test has created it.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import time
from typing import Any

GATE_GUARD_S = 120.0
"""A gated unit of work gives up waiting after this long (a hang guard, not a timing)."""


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

    def open(self) -> None:
        """Let gated work go on (parked or still to come)."""
        with open(self.path + ".open", "w"):
            pass

    async def gate(self) -> None:
        """Park until ``open`` was called (by the test, in any process on this machine)."""
        deadline = time.monotonic() + GATE_GUARD_S
        while not os.path.exists(self.path + ".open"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the gate {self.path}.open was never opened")
            await asyncio.sleep(0.02)
