"""Waiting on events, never on the clock: the helpers every Ray test shares.

A test waits for what it needs to be true (a body reported, a process exited, a statistic
reached a value); the only deadline is ``HANG_GUARD_S``, which turns a hang into a failure
with a message and is never part of what the test proves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

__all__ = ["HANG_GUARD_S", "eventually", "file_appears", "process_gone", "wait_for_file"]

HANG_GUARD_S = 120.0
"""Upper bound of every wait on an event: long enough that only a hang reaches it."""

_T = TypeVar("_T")


async def eventually(probe: Callable[[], Awaitable[_T]], predicate: Callable[[_T], bool], what: str,
                     timeout: float = HANG_GUARD_S) -> _T:
    """Probe until ``predicate`` holds (for state that nobody pushes, e.g. an actor's statistics).

    Returns the last probe's value; fails naming ``what`` and that value after ``timeout``.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if predicate(value):
            return value
        assert time.monotonic() < deadline, f"{what}: not reached within {timeout:g}s; last value: {value!r}"
        await asyncio.sleep(0.02)


def _exited(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie waits only to be reaped
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or between the open and the read
        return True


async def process_gone(pid: int, timeout: float = HANG_GUARD_S) -> None:
    """Until process ``pid`` has exited: after it, the process runs no more code (a killed
    subagent cannot finish the call it was in)."""
    deadline = time.monotonic() + timeout
    while not _exited(pid):
        assert time.monotonic() < deadline, f"process {pid} was still running {timeout:g}s after it was killed"
        await asyncio.sleep(0.02)


async def file_appears(path: Path, timeout: float = HANG_GUARD_S) -> None:
    """Until ``path`` exists (a signal from code running in another process on this machine)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout:g}s"
        await asyncio.sleep(0.02)


def wait_for_file(path: Path, timeout: float = HANG_GUARD_S) -> None:
    """``file_appears`` for synchronous code (e.g. a function the orchestrator runs in a thread)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout:g}s")
        time.sleep(0.01)
