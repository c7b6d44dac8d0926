"""A run's past, read back from its store: committed changes, the state at any kept version,
and the retention window that decides how far back that goes.

Runs inside the orchestrator actor, on its I/O thread (store reads block on disk), so it is
serialised with checkpoints and compaction: a version never disappears half-way through a read.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel

from actors.orchestrator._recovery import replay_from
from actors.orchestrator.changes import Change
from actors.exceptions import HistoryCompacted
from cluster.storage import JournalGap, Store, VersionCompacted

__all__ = ["read_history", "state_at", "retention_floor"]

_SECONDS_PER_DAY = 86_400.0



def read_history(store: Store, run: str, since: int, until: int) -> list[Change]:
    """Every committed change with ``since < version <= until``; ``HistoryCompacted`` when
    versions in that range were compacted away."""
    oldest = store.oldest_version(run)
    if since < oldest:
        raise HistoryCompacted(run, since, oldest)
    changes = [Change.of_entry(e) for e in store.entries(run, since, until)]
    if [c.version for c in changes] != list(range(since + 1, until + 1)):
        # Compaction cannot remove rows above the oldest checkpoint, so this is a damaged store.
        have = [c.version for c in changes]
        missing = next(v for v in range(since + 1, until + 1) if v not in have)
        raise JournalGap(path=store.path, run=run, missing=missing, detail=f"reading history {since}..{until}")
    return changes


def state_at(store: Store, run: str, state_type: type[BaseModel], version: int) -> BaseModel:
    """The state exactly as it was committed at ``version`` (checkpoint + journal replay)."""
    try:
        checkpoint, entries = store.load_at(run, version)
    except VersionCompacted as exc:
        raise HistoryCompacted(run, version, exc.oldest) from None
    return replay_from(store, run, state_type, checkpoint, entries).state


def retention_floor(store: Store, run: str, version: int, keep_versions: int | None, keep_days: float | None) -> int | None:
    """The oldest version the retention window must keep readable, or None (keep everything).

    ``keep_versions`` keeps the last N versions; ``keep_days`` keeps what was committed in the
    last D days. With both, a version is dropped as soon as either rule lets it go, so the
    store stays bounded by the stricter of the two.
    """
    if keep_versions is None and keep_days is None:
        return None
    floor = 0
    if keep_versions is not None:
        floor = max(floor, version - keep_versions)
    if keep_days is not None:
        cutoff = time.time() - keep_days * _SECONDS_PER_DAY
        floor = max(floor, _version_before(store, run, cutoff, version))
    return floor


def _version_before(store: Store, run: str, cutoff: float, version: int) -> int:
    """The newest version committed at or before ``cutoff`` (its state is the oldest needed)."""
    entries: list[Any] = store.entries(run, store.oldest_version(run), version)
    older = [e.version for e in entries if e.created_at <= cutoff]
    return max(older) if older else 0
