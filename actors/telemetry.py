"""Telemetry hooks of the actors: OpenTelemetry spans and the metrics they record.

Spans: ``agent.orchestrator.parallel`` (``parallel.size``, ``parallel.cap``,
``agent.handoff.errors``) parents one ``agent.orchestrator.handoff`` per call
(``agent.skill``, ``agent.handoff.ok``, error status on failure). The handoff's context is
shipped to the subagent actor (``current_carrier``) and re-attached there
(``subagent_call``), so a skill's own spans nest under its handoff even on another node.

OpenTelemetry is optional: without the ``opentelemetry`` package every span helper is a
no-op. ``SOLOIST_TRACING=0`` (or ``set_tracing_enabled(False)``) turns spans off even
where it is installed; metrics have their own switch in ``cluster.metrics.registry``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from types import ModuleType
from typing import Any, TypeVar, cast

import ray

from cluster import metrics

_otel_trace: ModuleType | None  # None: opentelemetry is not installed (tracing is off)
try:  # optional dependency
    from opentelemetry import context as _otel_context
    from opentelemetry import trace as _otel_trace
    from opentelemetry.propagate import extract as _extract
    from opentelemetry.propagate import inject as _inject
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # exercised by tests/actors/test_tracing_without_otel.py
    _otel_trace = None

__all__ = [
    "handoff_span", "parallel_span", "subagent_span", "subagent_call", "current_carrier", "tracing_available",
    "tracing_enabled", "set_tracing_enabled", "mark_handoff", "mark_error", "measured_apply", "in_flight", "record_semaphore_wait", "record_queue_wait",
    "record_subagent_call", "record_handoff", "record_snapshot", "batch_finished", "handoff_outcome",
]

_TRACER_NAME = "soloist"
_tracing_on = os.environ.get("SOLOIST_TRACING", "1").strip().lower() not in ("0", "false", "off", "no")

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def tracing_available() -> bool:
    """Whether the OpenTelemetry API is importable here."""
    return _otel_trace is not None


def tracing_enabled() -> bool:
    """Whether handoffs create spans in this process."""
    return _otel_trace is not None and _tracing_on


def set_tracing_enabled(on: bool) -> None:
    """Turn handoff spans on or off in this process (``SOLOIST_TRACING=0`` sets the default)."""
    global _tracing_on
    _tracing_on = bool(on)


def _tracer(tracer: Any) -> Any:
    if _otel_trace is None or not _tracing_on:
        return None
    if tracer is not None:
        return tracer
    if isinstance(_otel_trace.get_tracer_provider(), _otel_trace.ProxyTracerProvider):
        # No SDK set up in this process (yet): its spans would record nothing, and opening
        # one still costs about 15 us of every handoff. Checked per span: one set later counts.
        return None
    return _otel_trace.get_tracer(_TRACER_NAME)


# ------------------------------------------------------------------ spans


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
    """Record how many items of a parallel handoff failed."""
    if span is not None:
        span.set_attribute("agent.handoff.errors", errors)


def current_carrier() -> dict[str, str] | None:
    """The current trace context as a dict to ship to a subagent (None without tracing)."""
    if _otel_trace is None or not _tracing_on:
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


# ------------------------------------------------------------------ metrics


class CallOutcome:
    """What a subagent call ended as; the body sets ``tool_error`` from its result."""

    __slots__ = ("tool_error",)

    def __init__(self) -> None:
        self.tool_error = False


_node_id: str | None = None


def _this_node() -> str:
    global _node_id
    if _node_id is None:
        _node_id = ray.get_runtime_context().get_node_id()
    return _node_id


@contextlib.contextmanager
def subagent_call(skill: str, carrier: dict[str, str] | None, orchestrator: str) -> Iterator[CallOutcome]:
    """Inside a subagent: the handoff's trace context, and ``soloist_subagent_calls_total``."""
    outcome = CallOutcome()
    label = "ok"
    try:
        with subagent_span(skill, carrier):
            yield outcome
        label = "tool_error" if outcome.tool_error else "ok"
    except asyncio.CancelledError:
        label = "cancelled"
        raise
    except BaseException:
        label = "error"
        raise
    finally:
        metrics.record_subagent_call(orchestrator, skill, _this_node(), label)


def handoff_outcome(error: BaseException | None) -> str:
    """The ``outcome`` label of a finished handoff."""
    if error is None:
        return "ok"
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    if isinstance(error, (TimeoutError, asyncio.TimeoutError)):
        return "timeout"
    return "error"


def record_handoff(orchestrator: str, skill: str, error: BaseException | None, seconds: float) -> None:
    metrics.record_handoff(orchestrator, skill, handoff_outcome(error), seconds)


def record_subagent_call(orchestrator: str, skill: str, node: str, outcome: str) -> None:
    """``soloist_subagent_calls_total`` for a handoff, counted by the requester: the
    subagent does not know the run's name (see ``actors.handoffs.replica``)."""
    metrics.record_subagent_call(orchestrator, skill, node, outcome)


def record_semaphore_wait(orchestrator: str, seconds: float) -> None:
    """How long a handoff's subagent waited for its permit (it reports the wait back)."""
    metrics.record_semaphore_wait(orchestrator, seconds)


def record_queue_wait(pool: str, skill: str, seconds: float) -> None:
    """How long a subagent call waited before its body started: for a started replica (the
    driver's share), then in its lane and for its permit (the replica's)."""
    metrics.record_queue_wait(pool, skill, seconds)


@contextlib.contextmanager
def in_flight(orchestrator: str) -> Iterator[None]:
    """Counts a handoff in flight from its dispatch to its answer."""
    metrics.add_in_flight(orchestrator, 1)
    try:
        yield
    finally:
        metrics.add_in_flight(orchestrator, -1)


def record_snapshot(orchestrator: str, seconds: float) -> None:
    metrics.record_snapshot(orchestrator, seconds)


def batch_finished() -> None:
    """A parallel handoff ended: push this process's metrics soon (no remote call here)."""
    metrics.request_flush()


def _apply_outcome(error: BaseException) -> str:
    name = type(error).__name__
    if name == "VersionConflict":
        return "conflict"
    if name in ("WriteRefused", "OrchestratorClosed"):
        return "refused"
    return "error"


def measured_apply(method: F) -> F:
    """Decorates the orchestrator actor's write methods: ``soloist_apply_*`` and the version.

    Reads ``self._spec.display_name`` and ``self._committed`` of the actor.
    """

    @functools.wraps(method)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        name = self._spec.display_name
        try:
            result = await method(self, *args, **kwargs)
        except BaseException as exc:
            metrics.record_apply(name, time.perf_counter() - started, _apply_outcome(exc))
            raise
        metrics.record_apply(name, time.perf_counter() - started, "ok")
        metrics.set_state_version(name, self._committed[0])
        return result

    return cast(F, wrapper)  # functools.wraps: the same signature as ``method``


def actor_started(orchestrator: str, version: int) -> None:
    """The orchestrator actor is up (new or restored) at ``version``."""
    metrics.set_state_version(orchestrator, version)


async def actor_closing() -> None:
    """The orchestrator actor is closing: push its metrics before the process goes away."""
    if metrics.enabled():
        await asyncio.to_thread(metrics.flush, 10.0)
