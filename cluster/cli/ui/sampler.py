"""Handoffs in flight over time, sampled from the cluster's metrics once a second.

The numbers are the ``soloist_handoffs_in_flight`` gauge that ``/metrics`` serves (every
process pushes its counts to the collector about once a second), so the page's chart and a
Prometheus scrape agree. One sampler serves every page of the server.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time

from cluster import metrics
from cluster.cli.ui.models import InFlightSample

__all__ = ["InFlightSampler"]

_log = logging.getLogger("soloist.ui")
_LOG_EXTRA = {"component": "ui"}


class InFlightSampler:
    """Keeps the last ``keep`` samples per run; ``start``/``stop`` run it on the server's loop."""

    def __init__(self, *, period: float = 1.0, keep: int = 300) -> None:
        self._period = period
        self._keep = keep
        self._series: dict[str, collections.deque[InFlightSample]] = {}  # run name -> newest samples
        self._task: asyncio.Task[None] | None = None
        self._failing = False  # logs a failing read once, not every second

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def latest(self, run: str) -> int | None:
        series = self._series.get(run)
        return series[-1].in_flight if series else None

    def series(self, run: str) -> list[InFlightSample]:
        return list(self._series.get(run, ()))

    def record(self, totals: metrics.MetricsDelta, at: float) -> None:
        """Add one sample per run that has the gauge in ``totals``."""
        for (name, labels), value in totals.gauge_adds.items():
            if name != "soloist_handoffs_in_flight" or not labels:
                continue
            series = self._series.setdefault(labels[0], collections.deque(maxlen=self._keep))
            series.append(InFlightSample(at=at, in_flight=max(0, int(value))))

    async def _run(self) -> None:
        while True:
            try:
                totals = await asyncio.to_thread(metrics.read_totals, 5.0)
                self.record(totals, time.time())
                self._failing = False
            except Exception as exc:  # metrics off or the collector restarting: the chart pauses
                if not self._failing:
                    _log.warning("cannot read handoffs in flight: %s: %s", type(exc).__name__, exc, extra=_LOG_EXTRA)
                self._failing = True
            await asyncio.sleep(self._period)
