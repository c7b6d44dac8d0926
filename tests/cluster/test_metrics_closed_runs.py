"""A closed run's metric series leave the endpoint once their final values could be scraped.

Counted from outside: the samples of the ``/metrics`` page that carry each run's
``orchestrator`` label, with runs opened, written and closed one after another.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from actors import Orchestrator
from cluster import metrics
from cluster.metrics import Aggregate, MetricsDelta
from tests._waits import eventually

N = 12
KEEP_S = 1.0


class State(BaseModel):
    total: int = 0


def _samples_by_run(text: str, prefix: str) -> dict[str, int]:
    """How many samples of the page each orchestrator whose name starts with ``prefix`` has."""
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.labels.get("orchestrator", "")
            if name.startswith(prefix):
                counts[name] = counts.get(name, 0) + 1
    return counts


def _version(name: str, value: float, at: float) -> MetricsDelta:
    return MetricsDelta(gauge_sets={("soloist_state_version", (name,)): (value, at)},
                        counters={("soloist_apply_total", (name, "ok")): 1.0})


def test_the_totals_drop_a_closed_runs_series_after_the_keep_time_only():
    collector = Aggregate()
    collector.merge(_version("a", 1, time.time()))
    collector.merge(_version("b", 1, time.time()))
    collector.closed("a", time.time(), keep_s=0.2)
    assert len(collector.totals().counters) == 2  # still shown: its final values get scraped
    time.sleep(0.3)
    assert list(collector.totals().counters) == [("soloist_apply_total", ("b", "ok"))]


def test_a_run_opened_again_before_its_series_go_keeps_them():
    collector = Aggregate()
    closed_at = time.time()
    collector.merge(_version("a", 1, closed_at - 1))
    collector.closed("a", closed_at, keep_s=0.2)
    collector.merge(_version("a", 2, closed_at - 0.5))  # the final push of the closing actor
    collector.merge(_version("a", 2, closed_at + 0.1))  # the run started again
    time.sleep(0.3)
    assert collector.totals().counters == {("soloist_apply_total", ("a", "ok")): 3.0}


@pytest.mark.ray
async def test_closed_runs_leave_the_endpoint_and_live_ones_stay(ray_session, monkeypatch):
    monkeypatch.setenv("SOLOIST_METRICS_KEEP_CLOSED_S", str(KEEP_S))
    prefix = f"closing-{uuid.uuid4().hex[:6]}-"
    live = Orchestrator(State(), name=f"{prefix}live")
    with metrics.serve_metrics(0, addr="127.0.0.1") as server:
        try:
            await live.apply(lambda s: setattr(s, "total", 1))
            for i in range(N):
                orch = Orchestrator(State(), name=f"{prefix}{i}")
                try:
                    await orch.apply(lambda s: setattr(s, "total", 1))
                    await orch.snapshot()
                finally:
                    await orch.close()
            metrics.flush()

            def page() -> str:
                import urllib.request

                with urllib.request.urlopen(server.url, timeout=30) as answer:
                    return answer.read().decode()

            async def by_run() -> dict[str, int]:
                return _samples_by_run(await asyncio.to_thread(page), prefix)

            # Before: every closed run kept its samples (about 20 each) for as long as the cluster ran.
            counts = await eventually(by_run, lambda c: list(c) == [f"{prefix}live"],
                                      "only the live run's samples on the endpoint", timeout=60)
            assert counts[f"{prefix}live"] > 0
        finally:
            await live.close()
