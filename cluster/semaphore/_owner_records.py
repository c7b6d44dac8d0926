"""The owners of a semaphore service's guarded leases, recorded outside the service.

A service keeps its tables in memory; after Ray restarts it, the renewals of live holders
re-register their leases. A holder paused past the recovery window cannot renew in time, yet
its work goes on once it resumes. So each owner (the actor that holds guarded leases and runs
the work they admit) is recorded in the cluster's key-value store (its GCS), one key per
owner under the service's name, while the service knows it: a restarted service reads them
back and asks each before it grants anything (see ``_service``).

Written before an owner's first lease is granted and deleted once it holds nothing, so the
records are bounded by the live owners, not by every replica the service has ever seen.
"""

from __future__ import annotations

import logging
from typing import Any

import cloudpickle

from cluster.records import ClusterRecords

__all__ = ["OwnerRecords"]

logger = logging.getLogger(__name__)
_LOG_EXTRA = {"component": "cluster-semaphore"}

_NAMESPACE = "soloist-semaphore-owners"


class OwnerRecords:
    """The recorded owners of one service: holder name -> the owner's actor handle."""

    def __init__(self, service: str) -> None:
        self._records = ClusterRecords(_NAMESPACE, service)

    def put(self, holder: str, owner: Any) -> None:
        self._records.put(holder, cloudpickle.dumps(owner))

    def delete(self, holder: str) -> None:
        self._records.delete(holder)

    def load(self) -> dict[str, Any]:
        """Every recorded owner; a record that no longer reads (its actor's handle cannot be
        rebuilt) is deleted and logged, since nobody could be asked about it."""
        owners: dict[str, Any] = {}
        for holder, value in self._records.load().items():
            try:
                owners[holder] = cloudpickle.loads(value)
            except Exception:  # a damaged record or a handle Ray cannot rebuild: name it, drop it
                logger.warning("semaphore owner record %r could not be read; dropped", holder, exc_info=True,
                               extra=_LOG_EXTRA)
                self._records.delete(holder)
        return owners

    def clear(self) -> None:
        """Forget every record of this service (a new service: nothing from before is held)."""
        self._records.clear()
