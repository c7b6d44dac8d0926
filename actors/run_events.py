"""What a ``Run`` reports: one typed event per step, and a typed outcome at the end."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from actors.interrupts import FinalStatus, Interrupt

__all__ = ["RunEvent", "RunEventKind", "RunOutcome", "OutcomeStatus"]

#: ``turn``: a coordinator's result was committed; ``low_confidence``: a result below the
#: threshold was set aside and the fallback runs instead; ``interrupt``: approval was asked
#: and the run stops to wait; ``handoffs``: tool calls went out (``calls``) or their results
#: were committed; ``resumed``: a run continued from its stored record; ``finished``: the end.
RunEventKind = Literal["turn", "low_confidence", "interrupt", "handoffs", "resumed", "finished"]

#: ``waiting``: stopped on open interrupts (answer them, then resume); the rest are final.
OutcomeStatus = Literal["waiting", FinalStatus]


class RunEvent(BaseModel):
    """One step of a run, in the order they happen (for live displays and logs)."""

    model_config = ConfigDict(frozen=True)

    kind: RunEventKind
    turn: int
    """Coordinator turns taken so far (vetting turns included)."""
    coordinator: str
    """Who acted: a coordinator's name, or ``handoffs`` for tool calls."""
    version: int
    """The state version this step committed (or found, when it committed nothing)."""
    stage: str
    reasoning: str | None = None
    confidence: float | None = None
    next: str | None = None
    """The coordinator due next (None once the run ends)."""
    calls: tuple[str, ...] = ()
    """``handoffs``: the tool names handed off in this step."""
    handoffs_in_flight: int = 0
    handoffs_total: int = 0
    interrupts: tuple[str, ...] = ()
    """``interrupt``: the ids of the interrupts this step opened."""
    status: FinalStatus | None = None
    """``finished``: the outcome's status."""


class RunOutcome(BaseModel):
    """How a run ended (or paused) and what it left in the state."""

    model_config = ConfigDict(frozen=True)

    run: str
    status: OutcomeStatus
    reason: str
    turns: int
    version: int
    handoffs: int
    handoff_errors: int
    wall_seconds: float
    state: dict[str, Any] = Field(default_factory=dict)
    """The final ``conversation_state`` without the run record (what the coordinators wrote)."""
    stage: str = "initial"
    pending_calls: int = 0
    """Tool calls left without a result (0 after every final ending; held calls while waiting)."""
    interrupts: tuple[Interrupt, ...] = ()
    """The open interrupts (status ``waiting``): answer each, then resume."""
