"""An in-memory :class:`~cluster.storage.base.Store` for tests and runs without a file.

Same contract and errors as the SQLite store, nothing durable. Values are kept as JSON
text, so callers never share objects with the store and non-JSON values fail at once.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .base import (
    KEEP_CHECKPOINTS,
    AgentRecordRow,
    Checkpoint,
    JournalEntry,
    RunInfo,
    Store,
    StoreHealth,
    StoreStatistics,
    check_entries,
    check_tail,
    dump_json,
    payload_text,
)
from .exceptions import MEMORY_PATH, JournalGap, RunExists, RunNotFound, StoreClosed, StoreError, VersionCompacted


@dataclass
class _Run:
    """Everything stored for one run (JSON text, like the SQLite rows)."""

    info: RunInfo
    # version -> (state JSON, created_at); at most KEEP_CHECKPOINTS entries.
    checkpoints: dict[int, tuple[str, float]] = field(default_factory=dict)
    # version -> (request_id, kind, payload JSON, created_at); consecutive versions.
    journal: dict[int, tuple[str, str, str, float]] = field(default_factory=dict)
    # every committed request id -> version; survives compaction.
    requests: dict[str, int] = field(default_factory=dict)
    # agent_id -> (record JSON, updated_at, seq)
    agents: dict[str, tuple[str, float, int]] = field(default_factory=dict)
    last_version: int = 0
    last_seq: int = 0


class MemoryStore(Store):
    """A thread-safe store that lives in this process only (``path`` is None). It has no
    other writer to keep a run from: ``Store``'s defaults for claims and activations."""

    path: str | None = None

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}  # guarded by _lock
        self._commits = 0  # successful write operations
        self._closed = False

    def create_run(self, info: RunInfo, initial_state: dict[str, Any]) -> None:
        """Store the run and its checkpoint at version 0; ``RunExists`` if present."""
        state = dump_json(initial_state, "initial state")
        with self._lock:
            self._check_open()
            if info.name in self._runs:
                raise RunExists(path=None, run=info.name)
            run = _Run(info=info)
            run.checkpoints[0] = (state, time.time())
            self._runs[info.name] = run
            self._commits += 1

    def get_run(self, name: str) -> RunInfo | None:
        """The run's info, or None."""
        with self._lock:
            run = self._runs.get(name)
            return run.info if run else None

    def list_runs(self) -> list[RunInfo]:
        """Every run, oldest first."""
        with self._lock:
            return sorted((r.info for r in self._runs.values()), key=lambda i: (i.created_at, i.name))

    def append(
        self, run: str, entries: Sequence[JournalEntry]
    ) -> concurrent.futures.Future[None]:
        """Add entries at once; the returned future is already resolved or failed."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        rows = [
            (e.version, e.request_id, e.kind, payload_text(e), e.created_at)
            for e in entries
        ]
        try:
            with self._lock:
                self._check_open()
                stored = self._run(run)
                check_entries(None, run, stored.last_version, entries, stored.requests.get)
                for version, request_id, kind, payload, created_at in rows:
                    stored.journal[version] = (request_id, kind, payload, created_at)
                    stored.requests[request_id] = version
                if rows:
                    stored.last_version = rows[-1][0]
                self._commits += 1
        except StoreError as exc:
            future.set_exception(exc)
        else:
            future.set_result(None)
        return future

    def flush(self) -> None:
        """Nothing is ever pending in memory."""

    def find_request(self, run: str, request_id: str) -> int | None:
        """The version committed with ``request_id``, or None."""
        with self._lock:
            return self._run(run).requests.get(request_id)

    def find_requests(self, run: str, request_ids: Sequence[str]) -> dict[str, int]:
        """The ids of ``request_ids`` that were committed, with their versions."""
        with self._lock:
            requests = self._run(run).requests
            return {r: requests[r] for r in request_ids if r in requests}

    def all_requests(self, run: str, *, at_most: int) -> dict[str, int] | None:
        """Every request id stored for the run, when there are at most ``at_most``."""
        with self._lock:
            requests = self._run(run).requests
            return dict(requests) if len(requests) <= at_most else None

    def load(self, run: str) -> tuple[Checkpoint, list[JournalEntry]]:
        """The latest checkpoint and every later journal entry, in order."""
        with self._lock:
            stored = self._run(run)
            base = max(stored.checkpoints)
            state, created_at = stored.checkpoints[base]
            tail = sorted((v, row) for v, row in stored.journal.items() if v > base)
        checkpoint = Checkpoint(version=base, state=json.loads(state), created_at=created_at)
        entries = [
            JournalEntry(version=v, request_id=r, kind=k, payload=json.loads(p), created_at=c)
            for v, (r, k, p, c) in tail
        ]
        check_tail(None, run, base, entries)
        return checkpoint, entries

    def put_checkpoint(self, run: str, version: int, state: dict[str, Any]) -> None:
        """Store a checkpoint (``version`` <= last journal version); keep the last two."""
        text = dump_json(state, f"checkpoint state of version {version}")
        with self._lock:
            self._check_open()
            stored = self._run(run)
            if version > stored.last_version:
                raise JournalGap(
                    path=None,
                    run=run,
                    missing=stored.last_version + 1,
                    detail=f"checkpoint at version {version} but the journal ends at {stored.last_version}",
                )
            stored.checkpoints[version] = (text, time.time())
            self._commits += 1

    def compact(self, run: str, *, keep_from: int | None = None) -> int:
        """Drop journal entries no longer needed (see ``SqliteStore.compact``); return how many."""
        with self._lock:
            self._check_open()
            stored = self._run(run)
            if keep_from is None:
                base = max(stored.checkpoints)
                for old in sorted(stored.checkpoints)[:-KEEP_CHECKPOINTS]:
                    del stored.checkpoints[old]
            else:
                candidates = [v for v in stored.checkpoints if v <= keep_from]
                if not candidates:
                    return 0
                base = max(candidates)
                for old in [v for v in stored.checkpoints if v < base]:
                    del stored.checkpoints[old]
                for request_id in [r for r, v in stored.requests.items() if v < base]:
                    del stored.requests[request_id]
            covered = [v for v in stored.journal if v <= base]
            for version in covered:
                del stored.journal[version]
            self._commits += 1
            return len(covered)

    def delete_run(self, run: str) -> None:
        """Delete everything stored for ``run``; ``RunNotFound`` if it is not stored."""
        with self._lock:
            self._check_open()
            self._run(run)
            del self._runs[run]
            self._commits += 1

    def collect_blobs(self) -> int:
        """Nothing to collect: a memory store keeps each run's metadata with the run."""
        with self._lock:
            self._check_open()
        return 0

    def update_run_metadata(self, run: str, changes: dict[str, Any]) -> RunInfo:
        """Merge ``changes`` into the run's metadata; return the updated info."""
        dump_json(changes, "run metadata")
        with self._lock:
            self._check_open()
            stored = self._run(run)
            stored.info = stored.info.model_copy(update={"metadata": {**stored.info.metadata, **json.loads(json.dumps(changes))}})
            self._commits += 1
            return stored.info

    def oldest_version(self, run: str) -> int:
        """The earliest version whose state can still be rebuilt (its oldest checkpoint)."""
        with self._lock:
            return min(self._run(run).checkpoints)

    def entries(self, run: str, since: int, until: int) -> list[JournalEntry]:
        """The journal entries with ``since < version <= until``, in order (what is still kept)."""
        with self._lock:
            rows = sorted((v, row) for v, row in self._run(run).journal.items() if since < v <= until)
        return [
            JournalEntry(version=v, request_id=r, kind=k, payload=json.loads(p), created_at=c)
            for v, (r, k, p, c) in rows
        ]

    def load_at(self, run: str, version: int) -> tuple[Checkpoint, list[JournalEntry]]:
        """The newest checkpoint at or before ``version`` and the entries up to ``version``."""
        with self._lock:
            stored = self._run(run)
            candidates = [v for v in stored.checkpoints if v <= version]
            if not candidates:
                raise VersionCompacted(path=None, run=run, requested=version, oldest=min(stored.checkpoints))
            base = max(candidates)
            state, created_at = stored.checkpoints[base]
        checkpoint = Checkpoint(version=base, state=json.loads(state), created_at=created_at)
        entries = self.entries(run, base, version)
        check_tail(None, run, base, entries)
        if base + len(entries) != version:
            raise JournalGap(path=None, run=run, missing=base + len(entries) + 1, detail=f"rebuilding version {version}")
        return checkpoint, entries

    def put_agent(self, run: str, agent_id: str, record: dict[str, Any]) -> AgentRecordRow:
        """Upsert an agent record with the run's next ``seq``."""
        text = dump_json(record, f"record of agent {agent_id!r}")
        with self._lock:
            self._check_open()
            stored = self._run(run)
            stored.last_seq += 1
            updated_at = time.time()
            stored.agents[agent_id] = (text, updated_at, stored.last_seq)
            self._commits += 1
            return AgentRecordRow(
                agent_id=agent_id, record=json.loads(text), updated_at=updated_at, seq=stored.last_seq
            )

    def get_agent(self, run: str, agent_id: str) -> AgentRecordRow | None:
        """One agent record, or None."""
        with self._lock:
            row = self._run(run).agents.get(agent_id)
        if row is None:
            return None
        return AgentRecordRow(agent_id=agent_id, record=json.loads(row[0]), updated_at=row[1], seq=row[2])

    def list_agents(self, run: str) -> list[AgentRecordRow]:
        """The run's agent records in ``seq`` order."""
        with self._lock:
            rows = sorted(self._run(run).agents.items(), key=lambda item: item[1][2])
        return [
            AgentRecordRow(agent_id=a, record=json.loads(t), updated_at=u, seq=s) for a, (t, u, s) in rows
        ]

    def statistics(self) -> StoreStatistics:
        """Counters; every write is its own (in-memory) batch."""
        with self._lock:
            rows = sum(len(r.journal) for r in self._runs.values())
            checkpoints = sum(len(r.checkpoints) for r in self._runs.values())
            commits = self._commits
        return StoreStatistics(
            path=None,
            durability=None,
            journal_rows=rows,
            checkpoints=checkpoints,
            commits=commits,
            fsync_batches=0,
            mean_batch_size=0.0,
        )

    def health(self) -> StoreHealth:
        """Always reachable while open: it lives in this process."""
        return StoreHealth(location=MEMORY_PATH, kind="memory", reachable=not self._closed,
                           error="closed" if self._closed else None)

    def close(self) -> None:
        """Refuse further writes; idempotent. Reads keep working."""
        with self._lock:
            self._closed = True

    def _run(self, name: str) -> _Run:
        """The stored run; caller holds ``_lock``."""
        run = self._runs.get(name)
        if run is None:
            raise RunNotFound(path=None, run=name)
        return run

    def _check_open(self) -> None:
        """Raise ``StoreClosed`` after close; caller holds ``_lock``."""
        if self._closed:
            raise StoreClosed(path=None)
