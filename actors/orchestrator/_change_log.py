"""The run's committed events, kept for subscribers: a bounded log with long-poll reads."""

from __future__ import annotations

import asyncio
import collections
import time

from actors.exceptions import ChangesUnavailable, OrchestratorClosed
from actors.orchestrator.changes import Change

__all__ = ["ChangeLog"]

_CHANGE_LOG_SIZE = 10_000  # committed events kept in memory
_MAX_CHANGES_PER_POLL = 1_000


class ChangeLog:
    """Every committed event numbered by ``seq``, the newest ``size`` kept in memory.

    Lives on the actor's event loop: ``append`` wakes every parked reader at once by
    setting the current event and starting a new one.
    """

    def __init__(self, run: str, size: int = _CHANGE_LOG_SIZE) -> None:
        self._run = run
        self._size = size
        self._events: collections.deque[Change] = collections.deque(maxlen=size)
        self._seq = 0  # seq of the newest event; events are numbered 1, 2, ...
        self._new_event = asyncio.Event()
        self._closed = False

    def append(self, change: Change) -> None:
        self._seq += 1
        self._events.append(change.model_copy(update={"seq": self._seq}))
        self._wake()

    def retained(self) -> list[Change]:
        """The events still held in memory, oldest first."""
        return list(self._events)

    def close(self) -> None:
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        self._new_event.set()
        self._new_event = asyncio.Event()

    async def read(self, after_seq: int | None, since_version: int, committed: int, timeout: float) -> list[Change]:
        """Events after ``after_seq`` (on the first poll: after version ``since_version``),
        waiting up to ``timeout`` seconds for one to arrive."""
        if after_seq is None:
            after_seq = self._seq_after_version(since_version, committed)
        deadline = time.monotonic() + timeout
        while not self._closed:
            if self._seq > after_seq:
                missing = self._seq - after_seq
                if missing > len(self._events):
                    raise ChangesUnavailable(
                        f"changes after event {after_seq} are no longer retained (the log keeps the last {self._size}); "
                        "resubscribe from a recent version"
                    )
                return list(self._events)[-missing:][:_MAX_CHANGES_PER_POLL]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            try:
                await asyncio.wait_for(self._new_event.wait(), remaining)
            except asyncio.TimeoutError:
                return []
        raise OrchestratorClosed(f"orchestrator {self._run!r} is closed")

    def _seq_after_version(self, since_version: int, committed: int) -> int:
        if since_version < 0:
            raise ValueError(f"subscribe(since=...) takes a version >= 0, got {since_version}")
        if since_version >= committed:
            return self._seq
        for change in self._events:
            if change.kind != "agent_state" and change.version == since_version + 1:
                return change.seq - 1
        oldest = next((c.version for c in self._events if c.kind != "agent_state"), committed + 1)
        raise ChangesUnavailable(
            f"changes after version {since_version} are no longer retained in memory (oldest retained: version {oldest}); "
            f"subscribe with since >= {oldest - 1} or read snapshot() first"
        )
