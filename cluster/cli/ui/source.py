"""Where the web page's data comes from: live runs (through ``Orchestrator``) and stored runs.

Every read and every action goes through the library's public API, as the command line
does: ``Orchestrator.attach`` (read-only unless the store, or the owning handle, is given),
``snapshot``, ``statistics``, ``agents``, ``history``, ``subscribe``, ``interrupts``,
``answer`` and ``fork``. Stored runs that are not running are read from the store without
starting anything. Store reads block on disk and run in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import ray

from actors import (Change, HistoryCompacted, Orchestrator, OrchestratorClosed, OrchestratorNotFound, PoolStatus,
                    answer_interrupt, effective_max_parallel, open_interrupts, pool_status)
from cluster.cli.ui import _stored
from cluster.cli.run_index import DEFAULT_LIMIT, NO_STATUS, RUN_STATUSES, IndexedRun, check_query
from cluster.cli.ui.models import ActionOutcome, HistoryPage, InterruptView, RunDetail, RunRow, RunsPage
from cluster.cli.ui.timeline import entry_from_change, reasoning_trail, run_status
from cluster.cli.ui.exceptions import ActionRefused, RunNotFoundInUi
from cluster.storage import redact

__all__ = ["RunSource"]

_log = logging.getLogger("soloist.ui")
_LOG_EXTRA = {"component": "ui"}

#: Entries per history page (the page asks for the newest page first).
DEFAULT_PAGE = 200
MAX_PAGE = 1_000
_TRAIL_SHOWN = 30  # the newest reasoning steps in the summary (the timeline has every version)


class RunSource:
    """Reads runs for the page and performs its actions.

    ``store`` is the run store the server was started with (stored runs, and the owner's
    capability for actions on runs it holds); ``owners`` are handles the server's process
    owns (``soloist run --ui``), used for actions on those runs.
    """

    def __init__(self, *, store: str | None = None, owners: dict[str, Orchestrator[Any]] | None = None,
                 live: bool = True) -> None:
        self.store = store
        self.live = live  # list the connected cluster's live runs and hosts (False: the store's runs only)
        self._owners: dict[str, Orchestrator[Any]] = dict(owners or {})
        self._readers: dict[str, Orchestrator[Any]] = {}  # read-only handles of live runs, by name

    def add_owner(self, orch: Orchestrator[Any]) -> None:
        self._owners[orch.name] = orch

    # ------------------------------------------------------------------ handles

    async def _live_handle(self, name: str) -> Orchestrator[Any] | None:
        if name in self._owners:
            return self._owners[name]
        handle = self._readers.get(name)
        if handle is not None:
            return handle
        try:
            handle = await asyncio.to_thread(Orchestrator.attach, name)
        except OrchestratorNotFound:
            return None
        self._readers[name] = handle
        return handle

    def _forget(self, name: str) -> None:
        self._readers.pop(name, None)

    async def _writer(self, name: str) -> Orchestrator[Any]:
        """A handle allowed to write: the owner's, or one attached with the server's store."""
        if name in self._owners:
            return self._owners[name]
        if self.store is not None and await asyncio.to_thread(_stored.has_run, self.store, name):
            handle = await asyncio.to_thread(Orchestrator.attach, name, store=self.store)
            self._owners[name] = handle
            return handle
        raise ActionRefused(
            f"run {name!r} can be watched but not changed from this server: it is not in the server's store "
            "(start `soloist ui --store PATH` with the run's store) and this process does not own it"
        )

    # -------------------------------------------------------------------- reads

    async def list_runs(self, *, offset: int = 0, limit: int = DEFAULT_LIMIT, status: str | None = None) -> RunsPage:
        """``limit`` runs from ``offset`` (those whose driver recorded ``status``, when given),
        with the count of every run by status and the run hosts; ``ValueError`` for a bad page.
        Counting and filtering read the run index only (the store's run table, the hosts'
        records); only the rows of the page are read in full."""
        query = check_query(offset, limit, status)
        page = await asyncio.to_thread(_stored.index, self.store, query, live=self.live)
        rows = await asyncio.gather(*(self._row(run) for run in page.runs))
        return RunsPage(runs=list(rows), total=page.total, offset=page.offset, limit=page.limit, status=page.status,
                        counts=page.counts, statuses=list(RUN_STATUSES), hosts=page.hosts, store=redact(self.store) if self.store is not None else None)

    async def _row(self, run: IndexedRun) -> RunRow:
        """One run of the page, read in full; an unloaded hosted run is not attached to (that
        would load it): its host's record and the store (when it is stored there) say what it is."""
        recorded = None if run.status == NO_STATUS else run.status
        if run.live and run.loaded is not False:
            row = await self._live_row(run.name, run.stored)
        elif run.stored and self.store is not None:
            row = await asyncio.to_thread(_stored.stored_row, self.store, run)
            if run.live:  # held (unloaded) by its host: live, at the version the host last saw if it knows one
                row = row.model_copy(update={"status": "live", "live": True,
                                             "version": row.version if run.version is None else run.version})
        else:
            row = RunRow(name=run.name, status="live", live=True, stored=False, version=run.version or 0)
        # the status in the state (a Run's record) when there is one, else the one recorded in the store
        return row.model_copy(update={"host": run.host, "loaded": run.loaded, "run_status": row.run_status or recorded})

    async def pools(self) -> list[PoolStatus]:
        """The subagent pools with a replica up, when this page is connected to a cluster."""
        return await pool_status() if ray.is_initialized() else []

    async def _live_row(self, name: str, stored: bool) -> RunRow:
        try:
            orch = await self._live_handle(name)
            if orch is None:
                raise OrchestratorNotFound(f"run {name!r} stopped")
            stats, (version, state) = await asyncio.gather(orch.statistics(), orch.versioned_snapshot())
            interrupts = await _interrupts(orch)
            last = await _last_change_at(orch, version)
            doc = state.model_dump(mode="json")
            return RunRow(name=name, status="waiting" if interrupts else "live", live=True, stored=stored,
                          stage=getattr(state, "conversation_stage", None), run_status=run_status(doc), version=version, last_change_at=last,
                          cap=effective_max_parallel(stats.max_parallel), state_type=stats.state_type)
        except (OrchestratorClosed, OrchestratorNotFound) as exc:
            self._forget(name)
            return RunRow(name=name, status="stored" if stored else "live", live=False, stored=stored, version=0,
                          error=str(exc))
        except Exception as exc:  # one unreadable run (e.g. its state class is not importable here) must not hide the rest
            _log.warning("cannot read live run %r: %s: %s", name, type(exc).__name__, exc, extra=_LOG_EXTRA)
            return RunRow(name=name, status="live", live=True, stored=stored, version=0,
                          error=f"{type(exc).__name__}: {exc}")

    async def detail(self, name: str, *, actions: bool, with_state: bool = True) -> RunDetail:
        """The run page's summary; ``with_state=False`` leaves the (possibly large) state out."""
        orch = await self._live_handle(name)
        if orch is None:
            return await self._stored_detail(name, actions=actions, with_state=with_state)
        try:
            stats, (version, state), agents, interrupts = await asyncio.gather(
                orch.statistics(), orch.versioned_snapshot(), orch.agents(), _interrupts(orch))
        except OrchestratorClosed:
            self._forget(name)
            return await self._stored_detail(name, actions=actions, with_state=with_state)
        doc = state.model_dump(mode="json")
        writable = name in self._owners or (self.store is not None and await asyncio.to_thread(_stored.has_run, self.store, name))
        return RunDetail(
            name=name, status="waiting" if interrupts else "live", live=True, stored=self.store is not None and writable,
            version=version, state_type=stats.state_type, stage=getattr(state, "conversation_stage", None),
            state=doc if with_state else None, run_status=run_status(doc),
            statistics=stats.model_dump(mode="json"), agents=agents, interrupts=interrupts,
            reasoning=reasoning_trail(doc)[-_TRAIL_SHOWN:], cap=effective_max_parallel(stats.max_parallel), actions=actions,
            can_fork=actions, can_answer=actions and writable,
        )

    async def _stored_detail(self, name: str, *, actions: bool, with_state: bool) -> RunDetail:
        if self.store is None:
            raise RunNotFoundInUi(f"no live run named {name!r} (and this server has no --store to look in)")
        view = await asyncio.to_thread(_stored.read_run, self.store, name)
        return RunDetail(
            name=name, status="stored", live=False, stored=True, version=view.version, state_type=view.state_type,
            stage=view.stage, state=view.state if with_state else None, state_note=view.note,
            run_status=run_status(view.state), agents=view.agents, reasoning=reasoning_trail(view.state)[-_TRAIL_SHOWN:],
            actions=actions,
        )

    async def history(self, name: str, *, before: int | None, limit: int = DEFAULT_PAGE) -> HistoryPage:
        """Up to ``limit`` versions below ``before`` (None: from the newest), newest first."""
        limit = max(1, min(limit, MAX_PAGE))
        orch = await self._live_handle(name)
        if orch is None:
            if self.store is None:
                raise RunNotFoundInUi(f"no live run named {name!r} (and this server has no --store to look in)")
            return await asyncio.to_thread(_stored.history_page, self.store, name, before, limit)
        top = (await orch.version()) if before is None else min(before - 1, await orch.version())
        since = max(0, top - limit)
        if top <= 0:
            return HistoryPage(entries=[], next_before=None, oldest_available=None)
        try:
            changes: list[Change] = await orch.history(since=since, until=top)
        except HistoryCompacted as exc:  # retention dropped these versions: say so in the page
            return HistoryPage(entries=[], next_before=None, note=str(exc))
        entries = [entry_from_change(c) for c in changes if c.kind != "agent_state"]
        entries.sort(key=lambda e: e.version, reverse=True)
        return HistoryPage(entries=entries, next_before=since + 1 if since > 0 and entries else None)

    async def changes(self, name: str, since: int) -> AsyncIterator[Change]:
        """The run's committed changes after ``since``, live (ends when the run stops)."""
        orch = await self._live_handle(name)
        if orch is None:
            return
        try:
            async for change in orch.subscribe(since=since):
                yield change
        except OrchestratorClosed:
            self._forget(name)

    async def interrupts(self, name: str) -> list[InterruptView]:
        orch = await self._live_handle(name)
        return [] if orch is None else await _interrupts(orch)

    # ------------------------------------------------------------------ actions

    async def answer(self, name: str, interrupt_id: str, *, approve: bool, reason: str | None) -> ActionOutcome:
        orch = await self._writer(name)
        version = await answer_interrupt(orch, interrupt_id, approve=approve, reason=reason)
        verb = "approved" if approve else "rejected"
        return ActionOutcome(message=f"interrupt {interrupt_id} {verb}; the run is at version {version}", version=version, run=name)

    async def fork(self, name: str, new_name: str, *, at_version: int) -> ActionOutcome:
        orch = await self._live_handle(name)
        if orch is None:
            raise ActionRefused(f"run {name!r} is not running; forking needs a live run")
        forked = await orch.fork(new_name, at_version=at_version, store=self.store)
        self._owners[forked.name] = forked  # keeps the new run's owner handle alive with the server
        return ActionOutcome(message=f"forked {name!r} at version {at_version} into {forked.name!r}", run=forked.name,
                             version=at_version)


async def _interrupts(orch: Orchestrator[Any]) -> list[InterruptView]:
    return [InterruptView(id=i.id, kind=i.kind, question=i.question, call_ids=list(i.call_ids), coordinator=i.coordinator,
                          opened_version=i.opened_version, confidence=i.confidence)
            for i in await open_interrupts(orch)]


async def _last_change_at(orch: Orchestrator[Any], version: int) -> float | None:
    if version <= 0:
        return None
    try:
        changes = await orch.history(since=version - 1, until=version)
    except HistoryCompacted as exc:  # retention dropped it: the time is then unknown
        _log.debug("no time for version %s of %s: %s", version, orch.name, exc, extra=_LOG_EXTRA)
        return None
    return max((c.at for c in changes), default=None)

