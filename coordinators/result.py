"""`CoordinatorResult`: what a coordinator returns, transitions plus its decision.

The result keeps its own *sealed* copy of the transitions, so a coordinator that goes on
editing its batch after returning cannot change what the orchestrator applies. The runtime
honours `should_continue` (False stops the round) and `handoff_to` (the next coordinator).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from coordinators._frozen import FrozenDict, json_problems
from coordinators.batch import TransitionBatch
from coordinators.state import unwrap_validation_error
from coordinators.transitions import StateTransition

__all__ = ["CoordinatorResult"]


class CoordinatorResult(BaseModel):
    """A coordinator's answer: a sealed `TransitionBatch` and why, how sure, what next.

    `confidence` is in [0, 1]; `handoff_to` is None or the name of the coordinator to run
    next; `metadata` is JSON, stored frozen. Frozen and picklable (it crosses Ray).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    transitions: TransitionBatch = Field(default_factory=lambda: TransitionBatch().copy(sealed=True))
    reasoning: str | None = None
    confidence: float = 1.0
    metadata: FrozenDict = Field(default_factory=FrozenDict)
    should_continue: bool = Field(default=True, strict=True)
    handoff_to: str | None = None

    def __init__(
        self,
        transitions: TransitionBatch | Iterable[StateTransition] | None = None,
        reasoning: str | None = None,
        confidence: float = 1.0,
        metadata: Mapping[str, Any] | None = None,
        should_continue: bool = True,
        handoff_to: str | None = None,
    ) -> None:
        try:
            super().__init__(
                transitions=transitions,
                reasoning=reasoning,
                confidence=confidence,
                metadata=FrozenDict() if metadata is None else metadata,
                should_continue=should_continue,
                handoff_to=handoff_to,
            )
        except ValidationError as exc:
            raise unwrap_validation_error(exc) from None

    @field_validator("transitions", mode="before")
    @classmethod
    def _own_sealed_copy(cls, value: Any) -> TransitionBatch:
        if value is None:
            return TransitionBatch().copy(sealed=True)
        if isinstance(value, TransitionBatch):
            return value.copy(sealed=True)
        if isinstance(value, Mapping):
            return TransitionBatch.from_dict(value).copy(sealed=True)
        if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
            raise ValueError(
                f"transitions must be a TransitionBatch or an iterable of StateTransition, got {type(value).__name__}"
            )
        items = list(value)
        for index, item in enumerate(items):
            if not isinstance(item, (StateTransition, Mapping)):
                raise ValueError(f"transitions[{index}] must be a StateTransition, got {type(item).__name__}")
        return TransitionBatch(items).copy(sealed=True)

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence_in_range(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"confidence must be a number in [0, 1], got {value!r}")
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise ValueError(f"confidence must be within [0, 1], got {value!r}")
        return float(value)

    @field_validator("handoff_to")
    @classmethod
    def _handoff_named(cls, value: str | None) -> str | None:
        if value == "":
            raise ValueError("handoff_to must be None or a non-empty coordinator name, got ''")
        return value

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata_json(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            problems = json_problems(value, "metadata")
            if problems:
                raise ValueError("; ".join(problems))
        return value

    @classmethod
    def no_op(cls, reasoning: str | None = None, **kwargs: Any) -> CoordinatorResult:
        """A result that changes nothing (an empty batch)."""
        return cls(None, reasoning=reasoning, **kwargs)

    @classmethod
    def transitions_only(
        cls, *transitions: StateTransition | TransitionBatch, reasoning: str | None = None, **kwargs: Any
    ) -> CoordinatorResult:
        """A result holding the given transitions (batches among them are flattened)."""
        batch = TransitionBatch()
        for item in transitions:
            if isinstance(item, TransitionBatch):
                batch.extend(item)
            else:
                batch.add(item)
        return cls(batch, reasoning=reasoning, **kwargs)

