"""Store errors: one class per meaning, each naming the store file and the problem.

Every error carries ``path`` (the store file, or ``"<memory>"`` for a :class:`MemoryStore`)
and pickles faithfully, because the orchestrator raises them inside a Ray actor and the
caller receives a copy. All are runtime errors: the store was reachable but could not do
what was asked.
"""

from __future__ import annotations

from typing import Any
from coordinators.exceptions import SoloistError

MEMORY_PATH = "<memory>"

_WRITE_ADVICE = (
    "Nothing from this write was stored and the state in memory is unchanged; "
    "free disk space or make the file and its directory writable, then retry"
)


def _restore(cls: type[StoreError], message: str, fields: dict[str, Any]) -> StoreError:
    """Rebuild a pickled error without calling its keyword-only constructor."""
    error = cls.__new__(cls)
    RuntimeError.__init__(error, message)
    error.__dict__.update(fields)
    return error


class StoreError(SoloistError, RuntimeError):
    """Base of every storage error; raised directly only when SQLite fails a read for a
    reason other than corruption or permissions (e.g. an I/O error)."""

    path: str

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path or MEMORY_PATH

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (type(self), str(self), dict(self.__dict__)))


class StoreClosed(StoreError):
    """Raised when a method is called after :meth:`Store.close`."""

    def __init__(self, *, path: str | None) -> None:
        super().__init__(f"store {path or MEMORY_PATH} is closed", path=path)


class StoreCorrupted(StoreError):
    """Raised when the file is not a database, is truncated, fails ``PRAGMA quick_check``,
    or holds a row that does not parse. The file is left exactly as it was."""

    problem: str

    def __init__(self, *, path: str | None, problem: str) -> None:
        super().__init__(
            f"store {path or MEMORY_PATH} is corrupted: {problem}. "
            "The file was not modified; restore it from a backup or move it aside",
            path=path,
        )
        self.problem = problem


class SchemaTooNew(StoreError):
    """Raised when opening a file written by a newer soloist schema than this one supports."""

    found: int
    supported: int

    def __init__(self, *, path: str | None, found: int, supported: int) -> None:
        super().__init__(
            f"store {path or MEMORY_PATH} has schema version {found}, but this soloist "
            f"supports schema version {supported} at most; upgrade soloist to open it",
            path=path,
        )
        self.found = found
        self.supported = supported


class JournalGap(StoreError):
    """Raised when journal versions of a run are not consecutive: an append whose first
    version is not last+1 (nothing of it is written), or a stored journal with a hole."""

    run: str
    missing: int

    def __init__(self, *, path: str | None, run: str, missing: int, detail: str) -> None:
        super().__init__(
            f"journal gap in store {path or MEMORY_PATH}, run {run!r}: "
            f"version {missing} is missing ({detail})",
            path=path,
        )
        self.run = run
        self.missing = missing


class RunExists(StoreError):
    """Raised by ``create_run`` when a run with that name is already stored."""

    run: str

    def __init__(self, *, path: str | None, run: str) -> None:
        super().__init__(
            f"run {run!r} already exists in store {path or MEMORY_PATH}; "
            "attach to it or choose another name",
            path=path,
        )
        self.run = run


class RunNotFound(StoreError):
    """Raised when a method names a run that the store does not hold."""

    run: str

    def __init__(self, *, path: str | None, run: str) -> None:
        super().__init__(f"run {run!r} not found in store {path or MEMORY_PATH}", path=path)
        self.run = run


class DuplicateRequest(StoreError):
    """Raised when an appended entry reuses a request id already committed for that run;
    nothing of that append is written."""

    run: str
    request_id: str
    version: int

    def __init__(self, *, path: str | None, run: str, request_id: str, version: int) -> None:
        super().__init__(
            f"request id {request_id!r} of run {run!r} was already committed as "
            f"version {version} in store {path or MEMORY_PATH}",
            path=path,
        )
        self.run = run
        self.request_id = request_id
        self.version = version


class StoreWriteFailed(StoreError):
    """Raised when SQLite refuses a write (disk full, I/O error, lock timeout)."""

    problem: str

    def __init__(self, *, path: str | None, problem: str) -> None:
        super().__init__(
            f"could not write to store {path or MEMORY_PATH}: {problem}. {_WRITE_ADVICE}",
            path=path,
        )
        self.problem = problem


class StoreUnreachable(StoreWriteFailed):
    """Raised when a database server cannot be reached: refused at once for a reason no
    retry mends (wrong password, unknown database or role), or still unreachable after the
    store's retry time (``waited_s``). ``path`` names the server without its password. A
    write that fails so was not acknowledged; its request ids make writing it again safe
    (an entry that did commit is recognised, never applied twice)."""

    waited_s: float

    def __init__(self, *, path: str | None, problem: str, waited_s: float) -> None:
        waited = f" after retrying for {waited_s:.1f} s" if waited_s >= 0.05 else ""
        StoreError.__init__(
            self,
            f"store {path or MEMORY_PATH}: the database is unreachable{waited}: {problem}. "
            "Nothing unacknowledged is known to be stored; check that the server runs and the URL "
            "(host, port, user, password, database) is right, then retry",
            path=path,
        )
        self.problem = problem
        self.waited_s = waited_s


class StoreReadOnly(StoreWriteFailed):
    """Raised when the file or its directory cannot be written (permissions, read-only
    medium, read-only open); reads still work."""


class VersionCompacted(StoreError):
    """Raised when a version older than the retention window is asked for: its checkpoint
    and journal rows were compacted away. ``oldest`` is the earliest version still kept."""

    run: str
    requested: int
    oldest: int

    def __init__(self, *, path: str | None, run: str, requested: int, oldest: int) -> None:
        super().__init__(
            f"version {requested} of run {run!r} was compacted away in store {path or MEMORY_PATH}; "
            f"the earliest version still kept is {oldest}",
            path=path,
        )
        self.run = run
        self.requested = requested
        self.oldest = oldest


class RunLockedElsewhere(StoreError):
    """Raised when a run is already open for writing by another process: a run has exactly
    one writer (its orchestrator actor), across processes and Ray clusters. Nothing was
    written. ``holder`` describes that writer as it recorded itself (``pid``, ``host``, and
    the ``address`` of its Ray cluster when it has one); empty if it recorded nothing."""

    run: str
    holder: dict[str, Any]

    def __init__(self, *, path: str | None, run: str, holder: dict[str, Any]) -> None:
        super().__init__(
            f"run {run!r} in store {path or MEMORY_PATH} is already open for writing by "
            f"{describe_holder(holder)}; a run has one writer. {_reach_advice(holder)}",
            path=path,
        )
        self.run = run
        self.holder = dict(holder)


class WriterFenced(RunLockedElsewhere):
    """Raised when a write comes from an activation of the run that is no longer its newest:
    another orchestrator took the run up since (a host that was presumed dead, a driver that
    raced this one) and raised the run's fencing epoch. Nothing of this write was stored;
    the newer activation holds the run (``holder``), and this one must stop writing."""

    epoch: int
    current: int

    def __init__(self, *, path: str | None, run: str, epoch: int, current: int, holder: dict[str, Any]) -> None:
        StoreError.__init__(
            self,
            f"run {run!r} in store {path or MEMORY_PATH}: this writer's activation (epoch {epoch}) was superseded by "
            f"epoch {current}, held by {describe_holder(holder)}; nothing of this write was stored. "
            "Write through the run's current handle (Orchestrator.attach), never through the old one",
            path=path,
        )
        self.run = run
        self.holder = dict(holder)
        self.epoch = epoch
        self.current = current


def describe_holder(holder: dict[str, Any]) -> str:
    """``pid 123 on host h (Ray cluster at 1.2.3.4:6379)``, from what the writer recorded."""
    if not holder:
        return "another process (it recorded nothing about itself)"
    text = f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}"
    if holder.get("address"):
        text += f" (Ray cluster at {holder['address']})"
    return text


def _reach_advice(holder: dict[str, Any]) -> str:
    address = holder.get("address")
    if address:
        return (
            f"Reach the live run through its cluster (`soloist ... --address {address}`, or "
            f"connect(address={address!r}) then Orchestrator.attach), or stop that driver and retry"
        )
    return "Wait for that process to close the run, or stop it, and retry"
