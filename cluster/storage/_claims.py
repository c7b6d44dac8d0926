"""One writer per run, enforced by the store file's side: an exclusive OS lock per run.

A run's writer (its orchestrator actor) holds ``flock(LOCK_EX)`` on a lock file beside the
SQLite file (``<store>.locks/<run>.lock``) for as long as it has the run open, and records
who it is in that file (pid, host, Ray address). The kernel drops the lock when the holder
exits, however it exits (``close()``, a crash, SIGKILL), so a dead writer never blocks the
next one. Any other write to that run, from a store that does not hold the claim, takes the
same lock for the length of its transaction only, and is refused while a writer holds it.
Locks are per open file description: two claims in one process conflict too.
A deleted run's lock file is removed by whoever holds its lock, just before letting go
(``remove_lock``); a lock taken on a file removed meanwhile is let go and the path opened
again, so lock files are kept only for stored runs and never split one run's writers.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import socket
import time
from functools import lru_cache
from typing import Any

from .exceptions import RunLockedElsewhere

__all__ = ["WriterClaim", "claim", "lock_briefly", "remove_lock", "unlock"]

logger = logging.getLogger(__name__)
_LOG = {"component": "store"}
_RETRY_SECONDS = 0.05
_UNLOCKABLE = (errno.EACCES, errno.EPERM, errno.EROFS)  # a directory nothing can be written in


def _lock_path(store_file: str, run: str) -> str:
    """``<store>.locks/<readable part of the name>-<hash>.lock`` (any run name is a safe file name)."""
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", run)[:40]
    digest = hashlib.sha256(run.encode("utf-8")).hexdigest()[:16]
    return os.path.join(f"{store_file}.locks", f"{readable}-{digest}.lock")


@lru_cache(maxsize=64)
def _lock_directory(directory: str) -> None:
    """Make ``directory`` if missing, once per process (a host opens thousands of runs)."""
    os.makedirs(directory, exist_ok=True)


def _open(store_file: str, run: str) -> int | None:
    """The run's lock file, opened (and created); None when its directory cannot be written
    (then SQLite cannot write the store either: a WAL store writes beside its file)."""
    path = _lock_path(store_file, run)
    try:
        _lock_directory(os.path.dirname(path))
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:  # the directory was removed since: make it again
            _lock_directory.cache_clear()
            _lock_directory(os.path.dirname(path))
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno in _UNLOCKABLE:
            logger.warning("cannot create the writer lock of run %r beside %s (%s); the store is read-only here",
                           run, store_file, exc, extra=_LOG)
            return None
        raise


def _holder(fd: int) -> dict[str, Any]:
    """What the lock's holder recorded about itself ({} if nothing, or a half-written record)."""
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        found = json.loads(text) if text.strip() else {}
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _linked(fd: int, path: str) -> bool:
    """Whether ``fd`` is still the file at ``path`` (a deleted run's lock file is removed)."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (found.st_dev, found.st_ino) == (own.st_dev, own.st_ino)


def _try_lock(fd: int, path: str) -> bool | None:
    """Lock ``fd`` without waiting: True when locked, False when someone else holds it, None
    when it was locked but its file had been removed meanwhile (its run was deleted, see
    ``remove_lock``): a lock on a removed file excludes nobody, so open the path again."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    if _linked(fd, path):
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return None


def remove_lock(store_file: str, run: str, fd: int) -> None:
    """Remove the lock file of a deleted run, through ``fd`` that holds its lock (called just
    before it is unlocked, once the deletion's transaction ended): lock files are kept only
    for stored runs. Whoever opened the file before and locks it next finds it removed and
    opens the path again (``_try_lock``), so no two holders ever exclude each other on two
    different files."""
    path = _lock_path(store_file, run)
    try:
        if _linked(fd, path):
            os.unlink(path)
    except OSError as exc:  # left behind: the next lock of the name reuses it
        logger.warning("could not remove the writer lock of deleted run %r (%s)", run, exc, extra=_LOG)


class WriterClaim:
    """The exclusive right to write one run of one store file, held until ``release()`` or
    until this process ends."""

    def __init__(self, store_file: str, run: str, fd: int | None) -> None:
        self.store_file = store_file
        self.run = run
        self._fd = fd
        self._deleted = False  # the holder deleted the run: its lock file goes at release

    @property
    def held(self) -> bool:
        return self._fd is not None

    def run_deleted(self) -> None:
        """The holder deleted the run: remove its lock file at ``release`` (not before: until
        then this claim still excludes every other writer of the name)."""
        self._deleted = True

    def release(self) -> None:
        """Give the run up (idempotent); the holder record is cleared first."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
            if self._deleted:
                remove_lock(self.store_file, self.run, fd)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def claim(store_file: str, run: str, holder: dict[str, Any], *, timeout: float) -> WriterClaim:
    """Take the run's writer lock, waiting up to ``timeout`` seconds for a holder to let go;
    ``RunLockedElsewhere`` naming the holder otherwise. ``holder`` is recorded in the lock
    file (with this process's pid and host) for whoever is refused next."""
    fd = _open(store_file, run)
    if fd is None:
        return WriterClaim(store_file, run, None)
    deadline = time.monotonic() + timeout
    path = _lock_path(store_file, run)
    while not (locked := _try_lock(fd, path)):
        if locked is None:  # removed with its deleted run: lock the file at the path now
            os.close(fd)
            fd = _open(store_file, run)
            if fd is None:
                return WriterClaim(store_file, run, None)
            continue
        if time.monotonic() >= deadline:
            found = _holder(fd)
            os.close(fd)
            raise RunLockedElsewhere(path=store_file, run=run, holder=found)
        time.sleep(_RETRY_SECONDS)
    record = {"pid": os.getpid(), "host": socket.gethostname(), **holder, "since": time.time()}
    data = json.dumps(record).encode("utf-8")
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    logger.info("claimed run %r of %s for writing", run, store_file, extra=_LOG)
    return WriterClaim(store_file, run, fd)


def lock_briefly(store_file: str, run: str) -> int | None:
    """Lock the run for one transaction of a store that does not hold its claim; return the
    descriptor to ``unlock`` after the commit. ``RunLockedElsewhere`` if a writer holds it."""
    path = _lock_path(store_file, run)
    while True:
        fd = _open(store_file, run)
        if fd is None:
            return None
        locked = _try_lock(fd, path)
        if locked:
            return fd
        if locked is False:
            found = _holder(fd)
            os.close(fd)
            raise RunLockedElsewhere(path=store_file, run=run, holder=found)
        os.close(fd)  # removed with its deleted run: lock the file at the path now


def unlock(fd: int) -> None:
    """Release a lock taken by ``lock_briefly``."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
