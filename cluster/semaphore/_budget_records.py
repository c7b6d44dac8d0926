"""The charges of a scope's budget window, kept in the cluster's key-value store (its GCS).

A service keeps its tables in memory; a restart must not reset a budget's window (the
endpoint it guards still counts what was sent before). So every charge of a budgeted scope
is written there (one key per grant, ``<scope>/<lease id>``) before the grant's answer leaves
the service, rewritten when its release settles it, and deleted once it leaves the window.
A table made for the scope (after a restart, or when the scope is opened again) starts from
these. Times are stored as wall-clock seconds (a restarted service may run on another node,
whose monotonic clock means nothing here) and converted back to the service's monotonic clock.
"""

from __future__ import annotations

import json
import logging
import time

from ray.experimental.internal_kv import (  # the GCS key-value store, as _owner_records uses it
    _internal_kv_del,
    _internal_kv_get,
    _internal_kv_list,
    _internal_kv_put,
)

from cluster.semaphore._budget import WindowEntry

__all__ = ["BudgetRecords"]

logger = logging.getLogger(__name__)
_LOG_EXTRA = {"component": "cluster-semaphore"}

_NAMESPACE = "soloist-semaphore-budgets"


def _wall(monotonic: float) -> float:
    return time.time() - (time.monotonic() - monotonic)


def _monotonic(wall: float) -> float:
    return time.monotonic() - (time.time() - wall)


class BudgetRecords:
    """The recorded charges of one scope."""

    def __init__(self, scope: str) -> None:
        self._prefix = f"{scope}/".encode()

    def write(self, entries: list[WindowEntry], removed: list[str]) -> None:
        for entry in entries:
            value = {"granted_at": _wall(entry.granted_at), "tokens": entry.tokens, "requests": entry.requests,
                     "released_at": None if entry.released_at is None else _wall(entry.released_at),
                     "settled": entry.settled}
            _internal_kv_put(self._prefix + entry.key.encode(), json.dumps(value).encode(), overwrite=True,
                             namespace=_NAMESPACE)
        for key in removed:
            _internal_kv_del(self._prefix + key.encode(), namespace=_NAMESPACE)

    def load(self) -> list[WindowEntry]:
        """Every recorded charge, on this process's monotonic clock; a record that does not
        read is deleted and logged (its charge is lost: named, never silently)."""
        entries: list[WindowEntry] = []
        for key in _internal_kv_list(self._prefix, namespace=_NAMESPACE):
            raw = _internal_kv_get(key, namespace=_NAMESPACE)
            if raw is None:
                continue  # deleted meanwhile
            try:
                value = json.loads(raw)
                released = value["released_at"]
                entries.append(WindowEntry(
                    key=key[len(self._prefix):].decode(), granted_at=_monotonic(float(value["granted_at"])),
                    tokens=int(value["tokens"]), requests=int(value["requests"]),
                    released_at=None if released is None else _monotonic(float(released)),
                    settled=bool(value["settled"]),
                ))
            except (ValueError, KeyError, TypeError):
                logger.warning("semaphore budget record %r could not be read; dropped", key.decode(),
                               exc_info=True, extra=_LOG_EXTRA)
                _internal_kv_del(key, namespace=_NAMESPACE)
        return entries

    def clear(self) -> None:
        """Forget every charge of the scope (it was destroyed)."""
        _internal_kv_del(self._prefix, del_by_prefix=True, namespace=_NAMESPACE)
