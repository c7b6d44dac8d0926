"""Stored runs, read straight from the store without starting anything (blocking calls).

The state shown is the latest checkpoint plus the journal after it, replayed on the JSON
document: ``fn`` rows are diffs and apply as such; ``batch`` rows go through ``reduce`` when
the run's state is an ``AgentState``. For other state types the page shows the checkpoint
and says so (the timeline still lists every stored version).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from cluster.cli.ui.exceptions import RunNotFoundInUi
from cluster.cli.ui.models import HistoryPage, RunRow
from cluster.cli.ui.timeline import entry_from_journal, run_status
from cluster import process_registry
from cluster.storage import SqliteStore, apply_diff
from coordinators import AgentState, StateTransition, reduce

__all__ = ["StoredView", "has_run", "list_rows", "read_run", "history_page", "close_all"]

_AGENT_STATE = f"{AgentState.__module__}.{AgentState.__qualname__}"


def _store(path: str) -> SqliteStore:
    """One open store per path for the server's lifetime (the process registry's ``ui_stores``)."""
    store: SqliteStore = process_registry().ui_stores.get_or_create(path, lambda: SqliteStore(path))
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
    state, version, note = _replay(info.state_type, checkpoint.state, checkpoint.version, entries)
    agents = [{"agent_id": a.agent_id, **{k: a.record.get(k) for k in ("kind", "lifecycle", "last_error", "title", "restarts")},
               "updated_at": a.updated_at} for a in store.list_agents(name)]
    stage = state.get("conversation_stage") if isinstance(state, dict) else None
    return StoredView(name=name, state_type=info.state_type, version=entries[-1].version if entries else checkpoint.version,
                      created_at=info.created_at, last_change_at=entries[-1].created_at if entries else checkpoint.created_at,
                      state=state, stage=stage if isinstance(stage, str) else None,
                      note=note if version != (entries[-1].version if entries else checkpoint.version) else None, agents=agents)


def _replay(state_type: str, doc: dict[str, Any], version: int, entries: list[Any]) -> tuple[Any, int, str | None]:
    typed: AgentState | None = None
    for entry in entries:
        if entry.kind == "fn":
            if typed is not None:
                doc, typed = typed.model_dump(mode="json"), None
            doc = apply_diff(doc, entry.payload)
        elif state_type == _AGENT_STATE:
            typed = typed or AgentState.model_validate(doc)
            typed = reduce(typed, tuple(StateTransition.model_validate(t) for t in entry.payload))
        else:
            return doc, version, (f"state shown as of version {version} (a checkpoint); later {state_type} batches "
                                  "are listed in the timeline")
        version = entry.version
    return (typed.model_dump(mode="json") if typed is not None else doc), version, None


def list_rows(path: str) -> dict[str, RunRow]:
    rows: dict[str, RunRow] = {}
    for info in _store(path).list_runs():
        try:
            view = read_run(path, info.name)
        except Exception as exc:  # one damaged run must not hide the others: show its error
            rows[info.name] = RunRow(name=info.name, status="stored", live=False, stored=True, version=0,
                                     state_type=info.state_type, error=f"{type(exc).__name__}: {exc}")
            continue
        rows[info.name] = RunRow(name=info.name, status="stored", live=False, stored=True, stage=view.stage,
                                 run_status=run_status(view.state),
                                 version=view.version, last_change_at=view.last_change_at, state_type=view.state_type)
    return rows


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
