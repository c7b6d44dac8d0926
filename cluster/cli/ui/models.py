"""What the web page receives: JSON payloads, one frozen model per kind of answer.

Every value the page shows comes from one of these, so the boundary between the server and
the browser is typed; the page renders each field with ``textContent`` (never as HTML).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from actors import HostStatistics, PoolStatus

__all__ = [
    "RunRow",
    "RunsPage",
    "TransitionView",
    "TimelineEntry",
    "HistoryPage",
    "InterruptView",
    "InFlightSample",
    "RunDetail",
    "StateView",
    "ActionOutcome",
    "ErrorBody",
]

#: ``live``: an orchestrator actor serves it; ``waiting``: live with open interrupts;
#: ``stored``: only in the store (not running now).
RunStatus = Literal["live", "waiting", "stored"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class RunRow(_Frozen):
    """One line of the runs list."""

    name: str
    status: RunStatus
    live: bool
    stored: bool
    stage: str | None = None
    run_status: str | None = None
    """What a ``Run`` records in the state: running, waiting or a final status (``cluster.storage.FinalStatus``)."""
    version: int
    last_change_at: float | None = None
    in_flight: int | None = None
    cap: int | None = None
    state_type: str = ""
    error: str | None = None
    """Set when the run could not be read (the rest is what was known)."""
    host: str | None = None
    """A live run's host actor, or ``dedicated`` (an actor process of its own)."""
    loaded: bool | None = None
    """A hosted run: in its host's memory (False: unloaded until its next call)."""


class RunsPage(_Frozen):
    """One page of the runs list (``offset``, ``limit``, ``status``); only these rows were read."""

    runs: list[RunRow]
    total: int = 0
    """The runs that match ``status`` (every run when it is None)."""
    offset: int = 0
    limit: int = 0
    status: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    """Every run by the status its driver recorded (``none``: no status), whatever the filter."""
    statuses: list[str] = Field(default_factory=list)
    """What ``status=`` accepts."""
    hosts: list[HostStatistics] = Field(default_factory=list)
    """The run hosts of the cluster (runs loaded and unloaded, activations, unloads)."""
    store: str | None = None
    actions: bool = False
    pools: list[PoolStatus] = []
    """The subagent pools with a replica up (when the page is connected to a cluster)."""


class TransitionView(_Frozen):
    """A transition as the timeline shows it: its type and its data as (cut) JSON text."""

    type: str
    data: str
    cut: bool = False


class TimelineEntry(_Frozen):
    """One committed version."""

    version: int
    kind: str
    at: float | None = None
    transitions: list[TransitionView] = Field(default_factory=list)
    more_transitions: int = 0
    reasoning: str | None = None
    confidence: float | None = None
    coordinator: str | None = None


class HistoryPage(_Frozen):
    """Committed versions newest first; ``next_before`` pages further back (None: no more)."""

    entries: list[TimelineEntry]
    next_before: int | None = None
    oldest_available: int | None = None
    note: str | None = None


class InterruptView(_Frozen):
    id: str
    kind: str
    question: Any = None
    call_ids: list[str] = Field(default_factory=list)
    coordinator: str | None = None
    opened_version: int | None = None
    confidence: float | None = None


class InFlightSample(_Frozen):
    at: float
    in_flight: int


class RunDetail(_Frozen):
    """The run page's summary; the timeline is paged separately, the state served apart
    (``/api/state``) and left out here (None) unless asked for."""

    name: str
    status: RunStatus
    live: bool
    stored: bool
    version: int
    state_type: str = ""
    stage: str | None = None
    run_status: str | None = None
    state: Any = None
    state_note: str | None = None
    statistics: dict[str, Any] = Field(default_factory=dict)
    agents: list[dict[str, Any]] = Field(default_factory=list)
    interrupts: list[InterruptView] = Field(default_factory=list)
    reasoning: list[dict[str, Any]] = Field(default_factory=list)
    cap: int | None = None
    in_flight: list[InFlightSample] = Field(default_factory=list)
    actions: bool = False
    can_fork: bool = False
    can_answer: bool = False


class StateView(_Frozen):
    """The run's whole state at ``version`` (fetched apart from the summary: it can be large)."""

    version: int
    state: Any = None
    state_note: str | None = None


class ActionOutcome(_Frozen):
    ok: bool = True
    message: str
    version: int | None = None
    run: str | None = None


class ErrorBody(_Frozen):
    ok: bool = False
    error: str
    type: str
