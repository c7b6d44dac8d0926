"""Metrics: recorded where the work happens, summed by the collector, scraped from one endpoint."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from actors import Call, Orchestrator, SkillRegistry, handoff, parallel_handoff
from cluster.metrics import registry as metrics
from cluster.metrics import Aggregate, MetricsDelta
from tests._waits import eventually

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of a /metrics page, by (sample name, labels)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of every sample called ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return response.read().decode()


async def scrape_until(url: str, ready: Callable[[Samples], bool], what: str) -> Samples:
    """Scrape until ``ready`` holds: other processes push their deltas on their own timer."""
    return await eventually(lambda: asyncio.to_thread(lambda: parse(scrape(url))), ready, what)


# ------------------------------------------------------------------ no Ray needed


def test_deltas_from_several_processes_add_up_and_render_in_the_text_format():
    one, two = MetricsDelta(
        counters={("soloist_handoff_total", ("o", "add", "ok")): 3.0},
        gauge_adds={("soloist_handoffs_in_flight", ("o",)): 2.0},
        gauge_sets={("soloist_state_version", ("o",)): (5.0, 100.0)},
        histograms={("soloist_handoff_seconds", ("o", "add")): ((1,) + (0,) * 15 + (2,), 250.001)},
    ), MetricsDelta(
        counters={("soloist_handoff_total", ("o", "add", "ok")): 1.0},
        gauge_adds={("soloist_handoffs_in_flight", ("o",)): -2.0},
        gauge_sets={("soloist_state_version", ("o",)): (4.0, 99.0)},  # older: must not win
        histograms={("soloist_handoff_seconds", ("o", "add")): ((0, 1) + (0,) * 15, 0.002)},
    )
    agg = Aggregate()
    agg.merge(one)
    agg.merge(two)
    samples = parse(metrics.render(agg.totals()))
    assert value(samples, "soloist_handoff_total", orchestrator="o", skill="add", outcome="ok") == 4
    assert value(samples, "soloist_handoffs_in_flight", orchestrator="o") == 0
    assert value(samples, "soloist_state_version", orchestrator="o") == 5
    assert value(samples, "soloist_handoff_seconds_count", orchestrator="o", skill="add") == 4
    assert value(samples, "soloist_handoff_seconds_bucket", orchestrator="o", skill="add", le="0.001") == 1
    assert value(samples, "soloist_handoff_seconds_bucket", orchestrator="o", skill="add", le="0.0025") == 2
    assert value(samples, "soloist_handoff_seconds_bucket", orchestrator="o", skill="add", le="120.0") == 2
    assert value(samples, "soloist_handoff_seconds_bucket", orchestrator="o", skill="add", le="+Inf") == 4
    assert value(samples, "soloist_handoff_seconds_sum", orchestrator="o", skill="add") == pytest.approx(250.003)


def test_every_metric_of_the_design_contract_is_exported_even_before_anything_ran():
    names = {f.name for f in text_string_to_metric_families(metrics.render(MetricsDelta()))}
    # The parser reports counter families without their "_total" suffix.
    assert names >= {"soloist_apply", "soloist_apply_seconds", "soloist_snapshot_seconds", "soloist_handoff",
                     "soloist_handoff_seconds", "soloist_handoffs_in_flight", "soloist_semaphore_wait_seconds",
                     "soloist_state_version"}


def test_forgetting_an_orchestrator_drops_only_its_series():
    agg = Aggregate()
    agg.merge(MetricsDelta(counters={("soloist_apply_total", ("a", "ok")): 1.0, ("soloist_apply_total", ("b", "ok")): 2.0}))
    assert agg.forget("a") == 1
    assert agg.totals().counters == {("soloist_apply_total", ("b", "ok")): 2.0}


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> metrics._Recorder:
    """A private recorder with no background thread, so nothing is pushed behind the test's back."""
    rec = metrics._Recorder()
    monkeypatch.setattr(rec, "_ensure_thread", lambda: None)
    monkeypatch.setattr(metrics, "_recorder", rec)
    return rec


def test_recording_in_this_process_stays_local_until_a_flush_takes_it(recorder):
    metrics.record_handoff("local-o", "add", "ok", 0.01)
    metrics.record_handoff("local-o", "add", "ok", 0.02)
    taken = recorder.take()
    assert taken.counters[("soloist_handoff_total", ("local-o", "add", "ok"))] == 2
    assert sum(taken.histograms[("soloist_handoff_seconds", ("local-o", "add"))][0]) == 2
    assert recorder.take().is_empty()


def test_disable_records_nothing_and_enable_records_again(recorder):
    metrics.disable()
    assert not metrics.enabled()
    metrics.record_apply("off-o", 0.1, "ok")
    assert recorder.take().is_empty()
    metrics.enable()
    metrics.record_apply("off-o", 0.1, "ok")
    assert recorder.take().counters == {("soloist_apply_total", ("off-o", "ok")): 1.0}


def test_the_environment_switch_turns_metrics_off_in_a_new_process():
    code = "from cluster import metrics; print(metrics.enabled())"
    env = {**os.environ, "SOLOIST_METRICS": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"


def test_serve_metrics_rejects_a_bad_port():
    with pytest.raises(ValueError, match="port number 0-65535"):
        metrics.serve_metrics(70000)


# ------------------------------------------------------------------ on Ray


class AddIn(BaseModel):
    a: int
    b: int


class AddOut(BaseModel):
    sum: int


class State(BaseModel):
    total: int = 0


skills = SkillRegistry(replicas=2)


@skills.skill("add")
def add(inp: AddIn) -> AddOut:
    return AddOut(sum=inp.a + inp.b)


@skills.skill("fail")
def fail(inp: AddIn) -> AddOut:
    raise ValueError("no")


@pytest.fixture
def server(ray_session) -> Iterator[metrics.MetricsServer]:
    with metrics.serve_metrics(0, addr="127.0.0.1") as s:
        yield s


@pytest.mark.ray
async def test_a_parallel_batch_shows_up_on_the_endpoint_with_the_counts_that_ran(server):
    orch = Orchestrator(State(), caller=skills)
    name = orch.name
    try:
        calls = [Call("add", AddIn(a=i, b=1)) for i in range(5)] + [Call("fail", AddIn(a=0, b=0)) for _ in range(2)]
        results = await parallel_handoff(orch, calls, AddOut)
        assert [r.ok for r in results] == [True] * 5 + [False] * 2
        assert (await handoff(orch, Call("add", AddIn(a=2, b=2)), AddOut)).sum == 4
        for r in results[:5]:
            await orch.apply(lambda s, n=r.output.sum: setattr(s, "total", s.total + n))
        await orch.snapshot()
    finally:
        await orch.close()  # the orchestrator actor pushes its metrics as it closes
    metrics.flush()

    def ready(s: Samples) -> bool:
        return total(s, "soloist_subagent_calls_total", orchestrator=name) == 8

    samples = await scrape_until(server.url, ready, "the batch's handoffs on the endpoint")
    o = {"orchestrator": name}
    assert value(samples, "soloist_handoff_total", skill="add", outcome="ok", **o) == 6
    assert value(samples, "soloist_handoff_total", skill="fail", outcome="error", **o) == 2
    assert value(samples, "soloist_handoff_seconds_count", skill="add", **o) == 6
    assert value(samples, "soloist_handoff_seconds_count", skill="fail", **o) == 2
    assert value(samples, "soloist_semaphore_wait_seconds_count", **o) == 8
    assert value(samples, "soloist_handoffs_in_flight", **o) == 0
    assert value(samples, "soloist_apply_total", outcome="ok", **o) == 5
    assert value(samples, "soloist_apply_seconds_count", **o) == 5
    assert value(samples, "soloist_state_version", **o) == 5
    assert value(samples, "soloist_snapshot_seconds_count", **o) == 1
    assert total(samples, "soloist_subagent_calls_total", skill="add", outcome="ok", **o) == 6
    assert total(samples, "soloist_subagent_calls_total", skill="fail", outcome="tool_error", **o) == 2


@pytest.mark.ray
async def test_failed_writes_are_counted_by_outcome_and_leave_the_version_alone(server):
    orch = Orchestrator(State(), caller=skills)
    name = orch.name
    try:
        await orch.apply(lambda s: setattr(s, "total", 1))
        with pytest.raises(ZeroDivisionError):
            await orch.apply(lambda s: 1 / 0)
    finally:
        await orch.close()
    samples = await scrape_until(server.url, lambda s: total(s, "soloist_apply_total", orchestrator=name) == 2,
                                 "both failed writes on the endpoint")
    assert value(samples, "soloist_apply_total", orchestrator=name, outcome="ok") == 1
    assert value(samples, "soloist_apply_total", orchestrator=name, outcome="error") == 1
    assert value(samples, "soloist_state_version", orchestrator=name) == 1


@pytest.mark.ray
async def test_a_closed_server_stops_answering(ray_session):
    server = metrics.serve_metrics(0, addr="127.0.0.1")
    url = server.url
    assert "soloist_handoff_total" in await asyncio.to_thread(scrape, url)
    server.close()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)
