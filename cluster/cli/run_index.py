"""Which runs exist, cheaply: the list ``soloist status`` and the runs page page through.

A machine holds tens of thousands of runs, so the list is built from cheap reads only: the
store's run table with each run's metadata (the ``status`` a run's driver records there) and,
on a live cluster, the records the run hosts keep of their runs (``hosted_runs()``: host,
loaded or unloaded, last known version) and the names of the dedicated orchestrators.
Counting, filtering and ordering use nothing else; a caller then reads in full only the runs
of the page it shows.

Order: live runs first, by name; then stored runs that are not live, newest first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from actors import HostStatistics, Orchestrator, host_statistics, hosted_runs
from cluster.storage import SqliteStore

if TYPE_CHECKING:  # a PostgreSQL store is loaded only when used (cluster.storage)
    from cluster.storage import PostgresStore

__all__ = ["RUN_STATUSES", "NO_STATUS", "DEDICATED", "DEFAULT_LIMIT", "MAX_PAGE_LIMIT", "RunQuery", "IndexedRun",
           "RunIndexPage", "index_runs", "check_query"]

RunStatusFilter = Literal["running", "waiting", "complete", "stopped", "max_turns", "cancelled", "none"]
NO_STATUS = "none"
"""The status of a run whose driver recorded none (a plain orchestrator, or a live run that is
not in the store read)."""
RUN_STATUSES: tuple[str, ...] = get_args(RunStatusFilter)
"""What ``--status`` / ``status=`` accept, in the order counts are shown: the statuses a run's
driver records (``running``, ``waiting``, then ``cluster.storage.FinalStatus``), and ``none``."""
DEDICATED = "dedicated"
"""The ``host`` of a live run with an actor process of its own."""
DEFAULT_LIMIT = 50
MAX_PAGE_LIMIT = 500
"""The most rows the runs page asks for at once (each row on a page is read in full)."""


class RunQuery(BaseModel):
    """Which page of the runs: ``limit`` runs from ``offset`` among those with ``status``
    (None: every run)."""

    model_config = ConfigDict(frozen=True)

    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=DEFAULT_LIMIT, ge=1)
    status: RunStatusFilter | None = None


def check_query(offset: Any = 0, limit: Any = DEFAULT_LIMIT, status: Any = None, *,
                max_limit: int | None = None) -> RunQuery:
    """A ``RunQuery``, or ``ValueError`` naming every bad value and what is allowed."""
    problems = []
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        problems.append(f"offset must be a whole number >= 0, got {offset!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        problems.append(f"limit must be a whole number >= 1, got {limit!r}")
    elif max_limit is not None and limit > max_limit:
        problems.append(f"limit is at most {max_limit}, got {limit}")
    if status is not None and status not in RUN_STATUSES:
        problems.append(f"status must be one of {', '.join(RUN_STATUSES)}, got {status!r}")
    if problems:
        raise ValueError("; ".join(problems))
    return RunQuery(offset=offset, limit=limit, status=status)


class IndexedRun(BaseModel):
    """One run as the cheap reads know it (nothing of its state or journal)."""

    model_config = ConfigDict(frozen=True)

    name: str
    status: str
    """Recorded by the run's driver in the store (``NO_STATUS`` when none is)."""
    stored: bool
    live: bool
    host: str | None = None
    """Live: the host actor that holds the run, or ``DEDICATED``; None when not live."""
    loaded: bool | None = None
    """Live on a host: in its memory now (False: unloaded until its next call)."""
    version: int | None = None
    """The version its host last saw (hosted runs), None when not known without reading."""
    state_type: str | None = None
    created_at: float | None = None


class RunIndexPage(BaseModel):
    """A page of the runs, with what the whole list holds."""

    model_config = ConfigDict(frozen=True)

    runs: list[IndexedRun]
    total: int
    """Runs that match the query's status (every run without one)."""
    counts: dict[str, int]
    """Every run, by status (before filtering), in ``RUN_STATUSES`` order; zero counts left out."""
    offset: int
    limit: int
    status: str | None = None
    hosts: list[HostStatistics] = Field(default_factory=list)
    """The run hosts of the connected cluster (empty without one)."""

    @property
    def all_runs(self) -> int:
        return sum(self.counts.values())


def index_runs(store: SqliteStore | PostgresStore | None, query: RunQuery, *, live: bool) -> RunIndexPage:
    """The page ``query`` asks for, of the runs in ``store`` and (``live``) of the connected
    cluster. Blocking: store reads and calls to the run hosts."""
    runs = _collect(store, live=live)
    counts = {s: n for s in RUN_STATUSES if (n := sum(1 for r in runs if r.status == s))}
    matching = runs if query.status is None else [r for r in runs if r.status == query.status]
    hosts = host_statistics() if live else []
    return RunIndexPage(runs=matching[query.offset: query.offset + query.limit], total=len(matching), counts=counts,
                        offset=query.offset, limit=query.limit, status=query.status, hosts=hosts)


def _collect(store: SqliteStore | PostgresStore | None, *, live: bool) -> list[IndexedRun]:
    stored = {info.name: info for info in store.list_runs()} if store is not None else {}
    found: list[IndexedRun] = []
    if live:
        hosted = {record.name: (host, record) for host, record in hosted_runs() if record.named}
        for name in sorted({*Orchestrator.list_live(), *hosted}):
            info = stored.get(name)
            host, record = hosted.get(name, (DEDICATED, None))
            found.append(IndexedRun(
                name=name, status=_status_of(info), stored=info is not None, live=True, host=host,
                loaded=None if record is None else record.loaded, version=None if record is None else record.version,
                state_type=None if info is None else info.state_type, created_at=None if info is None else info.created_at))
    seen = {r.name for r in found}
    rest = sorted((info for name, info in stored.items() if name not in seen), key=lambda i: (-i.created_at, i.name))
    found += [IndexedRun(name=info.name, status=_status_of(info), stored=True, live=False, state_type=info.state_type,
                         created_at=info.created_at) for info in rest]
    return found


def _status_of(info: Any) -> str:
    status = None if info is None else info.metadata.get("status")
    return status if isinstance(status, str) and status in RUN_STATUSES else NO_STATUS
