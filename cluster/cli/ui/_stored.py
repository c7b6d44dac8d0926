"""Stored runs, read straight from the store without starting anything (blocking calls).

The state shown is the latest checkpoint plus the journal after it, replayed by the storage
layer's ``replay`` (the orchestrator's own): ``fn`` rows are diffs; ``batch`` rows go through
``reduce`` when the run's state is an ``AgentState``. For other state types the page does not
load the run's class: it applies the diffs up to the first batch and says so (the timeline
still lists every stored version).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from cluster.cli.run_index import IndexedRun, RunIndexPage, RunQuery, index_runs
from cluster.cli.ui.exceptions import RunNotFoundInUi
from cluster.cli.ui.models import HistoryPage, RunRow
from cluster.cli.ui.timeline import entry_from_journal, run_status
from cluster import process_registry
from cluster.storage import Checkpoint, JournalEntry, RunInfo, SqliteStore, open_store, replay
from coordinators import AgentState

if TYPE_CHECKING:  # a PostgreSQL store is loaded only when used (cluster.storage)
    from cluster.storage import PostgresStore

__all__ = ["StoredView", "has_run", "index", "stored_row", "read_run", "history_page", "close_all"]

_AGENT_STATE = f"{AgentState.__module__}.{AgentState.__qualname__}"


class _Document(BaseModel):
    """A stored state of a class this process does not load: its JSON document, kept as is."""

    model_config = ConfigDict(extra="allow")


def _store(path: str) -> SqliteStore | PostgresStore:
    """One open store per path or URL for the server's lifetime (the process registry's ``ui_stores``)."""
    store: SqliteStore | PostgresStore = process_registry().ui_stores.get_or_create(path, lambda: open_store(path))
    return store


def close_all() -> None:
    for store in process_registry().ui_stores.pop_where(lambda _path: True):
        store.close()


class StoredView(BaseModel):
    """A stored run as the page shows it."""

    model_config = ConfigDict(frozen=True)

    name: str
    state_type: str
    version: int
    created_at: float
    last_change_at: float | None
    state: Any
    stage: str | None
    note: str | None
    agents: list[dict[str, Any]]


def has_run(path: str, name: str) -> bool:
    return _store(path).get_run(name) is not None


def read_run(path: str, name: str) -> StoredView:
    store = _store(path)
    info = store.get_run(name)
    if info is None:
        raise RunNotFoundInUi(f"no run named {name!r} in {path} (and no live run by that name)")
    checkpoint, entries = store.load(name)
    state, note = _replay(path, info, checkpoint, entries)
    agents = [{"agent_id": a.agent_id, **{k: a.record.get(k) for k in ("kind", "lifecycle", "last_error", "title", "restarts")},
               "updated_at": a.updated_at} for a in store.list_agents(name)]
    stage = state.get("conversation_stage") if isinstance(state, dict) else None
    return StoredView(name=name, state_type=info.state_type, version=entries[-1].version if entries else checkpoint.version,
                      created_at=info.created_at, last_change_at=entries[-1].created_at if entries else checkpoint.created_at,
                      state=state, stage=stage if isinstance(stage, str) else None, note=note, agents=agents)


def _replay(path: str, info: RunInfo, checkpoint: Checkpoint, entries: list[JournalEntry]) -> tuple[dict[str, Any], str | None]:
    """The state document at the newest version this page can rebuild, and a note when that is
    older than the run's last version. Without the run's state class (anything but an
    ``AgentState``) the batches cannot be reduced: the diffs up to the first batch are applied."""
    if info.state_type == _AGENT_STATE:
        return replay(checkpoint, entries, AgentState, run=info.name, path=path).model_dump(mode="json"), None
    diffs = list(itertools.takewhile(lambda entry: entry.kind == "fn", entries))
    document = replay(checkpoint, diffs, _Document, run=info.name, path=path).model_dump(mode="json")
    if len(diffs) == len(entries):
        return document, None
    version = diffs[-1].version if diffs else checkpoint.version
    return document, (f"state shown as of version {version} (a checkpoint); later {info.state_type} batches "
                      "are listed in the timeline")


def index(path: str | None, query: RunQuery, *, live: bool) -> RunIndexPage:
    """The page of the run index ``query`` asks for (cheap reads: nothing of any run's journal)."""
    return index_runs(_store(path) if path is not None else None, query, live=live)


def stored_row(path: str, run: IndexedRun) -> RunRow:
    """One stored run of a page, read in full (its state replayed); a run that cannot be read
    is a row that says why, so one damaged run never hides the others."""
    try:
        view = read_run(path, run.name)
    except Exception as exc:
        return RunRow(name=run.name, status="stored", live=False, stored=True, version=0, state_type=run.state_type or "",
                      error=f"{type(exc).__name__}: {exc}")
    return RunRow(name=run.name, status="stored", live=False, stored=True, stage=view.stage, run_status=run_status(view.state),
                  version=view.version, last_change_at=view.last_change_at, state_type=view.state_type)


def history_page(path: str, name: str, before: int | None, limit: int) -> HistoryPage:
    store = _store(path)
    if store.get_run(name) is None:
        raise RunNotFoundInUi(f"no run named {name!r} in {path} (and no live run by that name)")
    checkpoint, tail = store.load(name)
    last = tail[-1].version if tail else checkpoint.version
    top = last if before is None else min(before - 1, last)
    since = max(0, top - limit)
    page = store.entries(name, since, top) if top > 0 else []
    oldest = store.oldest_version(name)
    more = since > 0 and since >= oldest and bool(page)
    note = None
    if not more and page and page[0].version > 1:
        note = f"versions before {page[0].version} are no longer kept (retention)"
    elif not page and top > 0:
        note = f"versions up to {top} are no longer kept (retention keeps checkpoints, not every version)"
    return HistoryPage(entries=[entry_from_journal(e.version, e.kind, e.payload, e.created_at) for e in reversed(page)],
                       next_before=since + 1 if more else None, oldest_available=oldest, note=note)
