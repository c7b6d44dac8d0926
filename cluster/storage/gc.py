"""Removing finished runs from a store (``soloist gc``).

A run is *finished* when its driver recorded a final ``status`` in the run's metadata
(one of :data:`FinalStatus`) together with ``finished_at`` (a Unix time). Runs without a
status (plain orchestrators) and runs that wait for approval are never removed.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

from .base import RunInfo, Store
from .exceptions import RunLockedElsewhere

logger = logging.getLogger(__name__)

__all__ = ["FinalStatus", "FINISHED_STATUSES", "GcReport", "finished_runs", "parse_age", "remove_finished_runs"]

FinalStatus = Literal["complete", "stopped", "max_turns", "cancelled"]
"""The final statuses a run's driver (``actors.Run``) records: the one list, also the run
record's (``RunStatus`` is ``running``, ``waiting`` or one of these)."""
FINISHED_STATUSES: frozenset[str] = frozenset(get_args(FinalStatus))
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}


class GcReport(BaseModel):
    """What a collection removed (or would remove, with ``dry_run``) and what it kept."""

    model_config = ConfigDict(frozen=True)

    removed: tuple[str, ...]
    kept: tuple[str, ...]
    dry_run: bool
    values_removed: int = 0
    """Long metadata values (a driver's pickled caller, stored once for all its runs) that no
    run refers to any more, deleted after the runs (none in a dry run)."""


def parse_age(text: str) -> float:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"45s"``, ``"2w"`` (or plain seconds) -> seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text or "")
    if match is None:
        raise ValueError(f"expected an age such as 7d, 12h, 30m or 45s, got {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def finished_runs(store: Store, older_than: float, *, now: float | None = None) -> list[RunInfo]:
    """Runs that finished more than ``older_than`` seconds before ``now``."""
    if older_than < 0:
        raise ValueError(f"older_than must be >= 0 seconds, got {older_than}")
    cutoff = (time.time() if now is None else now) - older_than
    found = []
    for info in store.list_runs():
        status, finished_at = info.metadata.get("status"), info.metadata.get("finished_at")
        if status in FINISHED_STATUSES and isinstance(finished_at, (int, float)) and finished_at <= cutoff:
            found.append(info)
    return found


def remove_finished_runs(store: Store, older_than: float, *, dry_run: bool = False, now: float | None = None) -> GcReport:
    """Delete every run that finished more than ``older_than`` seconds ago, then the long
    metadata values no run refers to any more. A run that a live orchestrator still holds
    open (``RunLockedElsewhere``) is kept."""
    doomed = [info.name for info in finished_runs(store, older_than, now=now)]
    values_removed = 0
    if not dry_run:
        for name in list(doomed):
            try:
                store.delete_run(name)
            except RunLockedElsewhere as exc:
                logger.warning("kept run %r: %s", name, exc, extra={"component": "store"})
                doomed.remove(name)
        values_removed = store.collect_blobs()
    kept = [info.name for info in store.list_runs() if info.name not in doomed]
    return GcReport(removed=tuple(doomed), kept=tuple(kept), dry_run=dry_run, values_removed=values_removed)
