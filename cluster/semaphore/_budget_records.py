"""The charges of a scope's budget window, kept in the cluster's key-value store (its GCS).

A service keeps its tables in memory; a restart must not reset a budget's window (the
endpoint it guards still counts what was sent before). So every charge of a budgeted scope
is written there (one key per grant, ``<scope, hex>/<lease id>``: a scope name may hold a
``/``) before the grant's answer leaves the service, rewritten when its release settles it,
and deleted once it leaves the window. A table made for the scope (after a restart, or when
the scope is opened again) starts from these. The budget itself is recorded too (one key per
scope), so a restarted service rebuilds a budgeted table as such whichever call names it first. Times are stored as wall-clock seconds (a restarted service may run on another node,
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

from cluster.semaphore._budget import Budget, WindowEntry

__all__ = ["BudgetRecords"]

logger = logging.getLogger(__name__)
_LOG_EXTRA = {"component": "cluster-semaphore"}

_NAMESPACE = "soloist-semaphore-budgets"
_CONFIG_NAMESPACE = "soloist-semaphore-budget-configs"


def _wall(monotonic: float) -> float:
    return time.time() - (time.monotonic() - monotonic)


def _monotonic(wall: float) -> float:
    return time.monotonic() - (time.time() - wall)


class BudgetRecords:
    """The recorded charges of one scope."""

    def __init__(self, scope: str) -> None:
        self._scope_key = scope.encode().hex().encode()
        self._prefix = self._scope_key + b"/"

    def put_budget(self, budget: Budget) -> None:
        """Record the scope's budget (its configuration outlives the service too)."""
        _internal_kv_put(self._scope_key, budget.model_dump_json().encode(), overwrite=True,
                         namespace=_CONFIG_NAMESPACE)

    def budget(self) -> Budget | None:
        """The scope's recorded budget, if it has one; one that does not read is dropped and logged."""
        raw = _internal_kv_get(self._scope_key, namespace=_CONFIG_NAMESPACE)
        if raw is None:
            return None
        try:
            return Budget.model_validate_json(raw)
        except ValueError:
            logger.warning("semaphore budget of scope %s could not be read; dropped", self._scope_key.decode(),
                           exc_info=True, extra=_LOG_EXTRA)
            _internal_kv_del(self._scope_key, namespace=_CONFIG_NAMESPACE)
            return None

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
        """Forget the scope's budget and every charge of it (it was destroyed)."""
        _internal_kv_del(self._prefix, del_by_prefix=True, namespace=_NAMESPACE)
        _internal_kv_del(self._scope_key, namespace=_CONFIG_NAMESPACE)
