"""The write gate: processes writing one SQLite file take turns without SQLite's sleeps.

SQLite lets one transaction write a file at a time; a writer that finds the file locked
sleeps in SQLite's busy handler (1, 2, 5, 10, 15 ms and longer) however soon the lock is
free again. Two processes that both write all the time (two run hosts sharing a store)
then spend most of their time asleep. Each group commit therefore first takes an OS lock
beside the file (``<store>.locks/write.gate``): whoever waits is woken within a fraction of a
millisecond of its release. The kernel drops the lock with its holder, however it ends.

The gate only shortens waits: a writer that cannot take it within ``wait_s`` (a holder
stopped mid-transaction) goes on without it and SQLite's own lock and timeout decide, as
they would for a writer that knows nothing of the gate.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import time

__all__ = ["WriteGate"]

logger = logging.getLogger(__name__)
_LOG = {"component": "store"}
_FIRST_PAUSE_S = 0.00005
_LONGEST_PAUSE_S = 0.001
_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT)


class WriteGate:
    """The gate of one store file, as one open file description (one per store object)."""

    def __init__(self, store_file: str, *, wait_s: float = 10.0) -> None:
        self._wait_s = wait_s
        self._held = False
        self._store_file = store_file
        path = os.path.join(f"{store_file}.locks", "write.gate")
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno not in _UNWRITABLE:
                raise
            self._fd = None  # a read-only or full directory: SQLite's own lock decides alone

    def enter(self) -> None:
        """Take the gate, waiting up to ``wait_s`` (polling: a blocking ``flock`` has no timeout)."""
        if self._fd is None:
            return
        deadline = time.monotonic() + self._wait_s
        pause = _FIRST_PAUSE_S
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    logger.warning("the write gate of %s stayed closed for %.0f s; writing without it",
                                   self._store_file, self._wait_s, extra=_LOG)
                    return
                time.sleep(pause)
                pause = min(pause * 2, _LONGEST_PAUSE_S)
            else:
                self._held = True
                return

    def leave(self) -> None:
        """Let the next writer in (nothing if the gate was not taken)."""
        if self._held and self._fd is not None:
            self._held = False
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Release and close the descriptor; idempotent."""
        self.leave()
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
