"""OpenTelemetry spans for handoffs, with the context carried into subagent actors.

OpenTelemetry is optional: without the ``opentelemetry`` package every helper here is a
no-op. With it, ``handoff_span``/``parallel_span`` use the orchestrator's tracer (set by
``set_tracer``) or the global one, and ``subagent_span`` re-attaches the caller's context
inside the subagent actor so a skill's own spans nest under its handoff.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

try:  # optional dependency
    from opentelemetry import context as _otel_context
    from opentelemetry import trace as _otel_trace
    from opentelemetry.propagate import extract as _extract
    from opentelemetry.propagate import inject as _inject
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # pragma: no cover - exercised only where OpenTelemetry is absent
    _otel_trace = None

__all__ = ["handoff_span", "parallel_span", "subagent_span", "current_carrier", "tracing_available", "mark_error"]

_TRACER_NAME = "soloist"


def tracing_available() -> bool:
    return _otel_trace is not None


def _tracer(tracer: Any) -> Any:
    if _otel_trace is None:
        return None
    return tracer if tracer is not None else _otel_trace.get_tracer(_TRACER_NAME)


@contextlib.contextmanager
def handoff_span(tracer: Any, skill: str) -> Iterator[Any]:
    """``agent.orchestrator.handoff`` with ``agent.skill``; the caller sets the outcome."""
    t = _tracer(tracer)
    if t is None:
        yield None
        return
    with t.start_as_current_span("agent.orchestrator.handoff", attributes={"agent.skill": skill}, record_exception=False, set_status_on_exception=False) as span:
        yield span


@contextlib.contextmanager
def parallel_span(tracer: Any, size: int, cap: int) -> Iterator[Any]:
    """``agent.orchestrator.parallel`` with ``parallel.size`` and ``parallel.cap``."""
    t = _tracer(tracer)
    if t is None:
        yield None
        return
    with t.start_as_current_span("agent.orchestrator.parallel", attributes={"parallel.size": size, "parallel.cap": cap}) as span:
        yield span


def mark_handoff(span: Any, error: BaseException | None) -> None:
    """Record a handoff's outcome on its span."""
    if span is None:
        return
    span.set_attribute("agent.handoff.ok", error is None)
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


def mark_error(span: Any, errors: int) -> None:
    if span is not None:
        span.set_attribute("agent.handoff.errors", errors)


def current_carrier() -> dict[str, str] | None:
    """The current trace context as a dict to ship to a subagent (None without tracing)."""
    if _otel_trace is None:
        return None
    carrier: dict[str, str] = {}
    _inject(carrier)
    return carrier or None


@contextlib.contextmanager
def subagent_span(skill: str, carrier: dict[str, str] | None) -> Iterator[None]:
    """Inside a subagent: make the handoff's span the parent of whatever the skill traces."""
    if _otel_trace is None or not carrier:
        yield
        return
    token = _otel_context.attach(_extract(carrier))
    try:
        yield
    finally:
        _otel_context.detach(token)
