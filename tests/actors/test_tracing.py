"""OpenTelemetry spans: the parallel span, its handoff children, and a skill's own span nested under its handoff."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from pydantic import BaseModel

from actors import Call, Orchestrator, SkillRegistry, handoff, parallel_handoff, current_carrier, set_tracing_enabled
from tests._models import Empty

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_session")]


class WorkIn(BaseModel):
    tag: int


class WorkOut(BaseModel):
    """What the skill's own span looked like, inside the subagent actor (another process)."""

    tag: int
    trace_id: str
    span_id: str
    parent_span_id: str | None


skills = SkillRegistry(replicas=2)


@skills.skill("traced")
def traced(inp: WorkIn) -> WorkOut:
    # The subagent's process has no SDK configured: the skill brings its own provider, as a
    # deployed skill would (with an OTLP exporter), and reports its span's ids back.
    tracer = TracerProvider().get_tracer("skill")
    with tracer.start_as_current_span("skill.work") as span:
        ctx = span.get_span_context()
        parent = span.parent
    return WorkOut(tag=inp.tag, trace_id=f"{ctx.trace_id:032x}", span_id=f"{ctx.span_id:016x}",
                   parent_span_id=f"{parent.span_id:016x}" if parent is not None else None)


@skills.skill("broken")
def broken(inp: WorkIn) -> WorkOut:
    raise RuntimeError(f"broken {inp.tag}")


@pytest.fixture
def traced_run(ray_session: None) -> tuple[Orchestrator, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    orch = Orchestrator(Empty(), caller=skills)
    orch.set_tracer(provider.get_tracer("test"))
    return orch, exporter  # each test closes it on its own event loop


def _hex(span: ReadableSpan) -> str:
    return f"{span.context.span_id:016x}"


async def test_parallel_span_parents_each_handoff_span_and_a_skill_span_nests_under_its_handoff(traced_run):
    orch, exporter = traced_run
    try:
        calls = [Call("traced", WorkIn(tag=i)) for i in range(3)] + [Call("broken", WorkIn(tag=9))]
        results = await parallel_handoff(orch, calls, WorkOut)
    finally:
        await orch.close()
    spans = exporter.get_finished_spans()
    [parallel] = [s for s in spans if s.name == "agent.orchestrator.parallel"]
    handoffs = [s for s in spans if s.name == "agent.orchestrator.handoff"]
    assert parallel.attributes["parallel.size"] == 4
    assert parallel.attributes["parallel.cap"] == 4
    assert parallel.attributes["agent.handoff.errors"] == 1
    assert len(handoffs) == 4
    assert all(h.parent is not None and h.parent.span_id == parallel.context.span_id for h in handoffs)
    assert all(h.context.trace_id == parallel.context.trace_id for h in handoffs)

    ok = [h for h in handoffs if h.attributes["agent.skill"] == "traced"]
    [failed] = [h for h in handoffs if h.attributes["agent.skill"] == "broken"]
    assert len(ok) == 3 and all(h.attributes["agent.handoff.ok"] is True for h in ok)
    assert all(h.status.status_code is not StatusCode.ERROR for h in ok)
    assert failed.attributes["agent.handoff.ok"] is False
    assert failed.status.status_code is StatusCode.ERROR
    assert "broken" in (failed.status.description or "")
    assert any(e.name == "exception" for e in failed.events)

    # Each skill span, made in a subagent actor, is a child of one of the handoff spans (one each).
    outputs = [r.output for r in results[:3]]
    assert all(o.trace_id == f"{parallel.context.trace_id:032x}" for o in outputs)
    assert sorted(o.parent_span_id for o in outputs) == sorted(_hex(h) for h in ok)
    assert not {o.span_id for o in outputs} & {_hex(s) for s in spans}  # their own spans, not the handoff's


async def test_a_single_handoff_span_has_the_skill_and_parents_the_skill_span(traced_run):
    orch, exporter = traced_run
    try:
        out = await handoff(orch, Call("traced", WorkIn(tag=1)), WorkOut)
    finally:
        await orch.close()
    [span] = exporter.get_finished_spans()
    assert span.name == "agent.orchestrator.handoff"
    assert span.attributes == {"agent.skill": "traced", "agent.handoff.ok": True}
    assert out.parent_span_id == _hex(span)


async def test_turning_tracing_off_creates_no_spans_and_ships_no_context(traced_run):
    orch, exporter = traced_run
    set_tracing_enabled(False)
    try:
        assert current_carrier() is None
        out = await handoff(orch, Call("traced", WorkIn(tag=2)), WorkOut)
    finally:
        set_tracing_enabled(True)
        await orch.close()
    assert exporter.get_finished_spans() == ()
    assert out.parent_span_id is None
