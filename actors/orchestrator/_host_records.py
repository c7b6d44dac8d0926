"""What a run host records outside itself: the runs it must close when their driver exits.

A run that is not detached is closed by its host once the driver that created it exits. A
host that Ray restarted holds nothing in memory; without a record, such a run whose driver
never calls again would stay open on it for ever, and its semaphore scope with it. So the
host records each such run in the cluster's key-value store (``cluster.records``) before
the run starts, and deletes the record when it lets the run go: a restarted host (or a new
host of the same name) reads them back and watches those drivers again.

Detached runs are not recorded: nothing closes them but their owner.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future, ThreadPoolExecutor

from pydantic import BaseModel, ConfigDict, ValidationError

from actors.orchestrator._reload import Reload
from cluster.records import ClusterRecords

__all__ = ["HostRecords", "RunRecord"]

_NAMESPACE = "soloist-host-runs"


class RunRecord(BaseModel):
    """One run a host must close when ``owner_job`` ends."""

    model_config = ConfigDict(frozen=True)

    owner_job: str
    named: bool = True
    scope: str = ""
    """The run's semaphore scope, left when the host closes the run."""
    reload: Reload | None = None
    """Where the run is stored (None: it had no store, and went with the host's memory)."""


class HostRecords:
    """The records of one host, written in the order the host asks for them (one thread of
    their own: a record deleted right after it was put is never put back by a late write)."""

    def __init__(self, host: str, log: logging.LoggerAdapter[logging.Logger]) -> None:
        self._records = ClusterRecords(_NAMESPACE, host)
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="soloist-host-records")
        self._log = log

    async def put(self, run: str, record: RunRecord) -> None:
        """Record ``run``; returns once the GCS holds the record."""
        value = record.model_dump_json(exclude_defaults=True).encode()
        await asyncio.get_running_loop().run_in_executor(self._writer, self._records.put, run, value)

    def delete(self, run: str) -> None:
        """Delete ``run``'s record, without waiting (a failure is logged: the record then
        stays until the host's next restart reads it, finds no driver and deletes it)."""
        self._writer.submit(self._records.delete, run).add_done_callback(
            lambda done: self._report(done, f"deleting the record of run {run!r}"))

    async def load(self) -> dict[str, RunRecord]:
        """Every run recorded for this host. A record that does not read is logged and deleted
        (nobody could close its run from it)."""
        raw = await asyncio.get_running_loop().run_in_executor(self._writer, self._records.load)
        records: dict[str, RunRecord] = {}
        for run, value in raw.items():
            try:
                records[run] = RunRecord.model_validate_json(value)
            except ValidationError as exc:
                self._log.error("the record of run %s does not read (%s); deleted", run, exc)
                self.delete(run)
        return records

    async def clear(self) -> None:
        """Delete every record of this host, after the writes asked for before (a host that
        retires holds no run)."""
        await asyncio.get_running_loop().run_in_executor(self._writer, self._records.clear)

    def _report(self, done: Future[None], what: str) -> None:
        problem = done.exception()
        if problem is not None:
            self._log.error("%s failed: %r", what, problem)
