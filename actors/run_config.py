"""``RunConfig``: a ``Run``'s coordinators and settings, checked once and frozen.

The run stores it once in its own state (``RUN_CONFIG_KEY``) when it starts, so that
``Run.restore`` can rebuild the same run in another process. In the state the coordinators
are cloudpickles (base64 text); everything else is plain JSON.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import cloudpickle
from pydantic import BaseModel, ConfigDict, SkipValidation, ValidationError, field_serializer, field_validator

from actors.exceptions import RunConfigError
from coordinators import Coordinator, thaw

__all__ = ["LowConfidence", "RunConfig"]

#: What happens to a result below the confidence threshold: the fallback takes the turn, or
#: the turn waits for a person's approval.
LowConfidence = Literal["fallback", "approval"]


class RunConfig(BaseModel):
    """Who takes which turn and the run's limits (see ``Run`` for each setting's meaning)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    coordinators: dict[str, SkipValidation[Coordinator]]
    """Name -> coordinator; stored as cloudpickles."""
    first: str
    fallback: str
    vetting: str | None = None
    max_turns: int = 40
    confidence_threshold: float = 0.0
    low_confidence: LowConfidence = "fallback"

    @classmethod
    def checked(
        cls,
        coordinators: Mapping[str, Coordinator] | Sequence[Coordinator],
        *,
        first: str,
        fallback: str | None = None,
        vetting: str | None = None,
        max_turns: int = 40,
        confidence_threshold: float = 0.0,
        low_confidence: LowConfidence = "fallback",
    ) -> RunConfig:
        """The config of these arguments, or ``RunConfigError`` naming every problem at once."""
        table = _table(coordinators)
        problems = [f"{n!r} has no async process(snapshot, message)" for n, c in table.items()
                    if not callable(getattr(c, "process", None))]
        fallback = first if fallback is None else fallback
        for role, name in (("first", first), ("fallback", fallback), ("vetting", vetting)):
            if name is not None and name not in table:
                problems.append(f"{role}={name!r} is not one of the coordinators ({', '.join(sorted(table)) or 'none'})")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            problems.append(f"max_turns must be an int >= 1, got {max_turns!r}")
        if isinstance(confidence_threshold, bool) or not isinstance(confidence_threshold, (int, float)) \
                or not 0.0 <= confidence_threshold <= 1.0:
            problems.append(f"confidence_threshold must be in [0, 1], got {confidence_threshold!r}")
        if low_confidence not in ("fallback", "approval"):
            problems.append(f"low_confidence must be 'fallback' or 'approval', got {low_confidence!r}")
        if problems:
            raise RunConfigError("bad Run configuration: " + "; ".join(problems))
        return cls(coordinators=table, first=first, fallback=fallback, vetting=vetting, max_turns=max_turns,
                   confidence_threshold=float(confidence_threshold), low_confidence=low_confidence)

    @classmethod
    def from_stored(cls, raw: Any, run: str) -> RunConfig:
        """The config ``stored()`` wrote into run ``run``'s state; ``RunConfigError`` if its
        coordinators cannot be loaded in this process."""
        try:
            return cls.model_validate(thaw(raw))
        except (ValidationError, _UnloadableCoordinators) as exc:
            raise RunConfigError(
                f"the coordinators of run {run!r} cannot be loaded here ({type(exc).__name__}: {exc}); "
                "make their code importable in this process, or build the Run yourself and call resume()"
            ) from exc

    def stored(self) -> dict[str, Any]:
        """This config as JSON-clean data, for the run's state."""
        return self.model_dump(mode="json")

    @field_serializer("coordinators", when_used="json")
    def _pickled(self, coordinators: dict[str, Coordinator]) -> dict[str, str]:
        return {name: base64.b64encode(cloudpickle.dumps(c)).decode("ascii") for name, c in coordinators.items()}

    @field_validator("coordinators", mode="before")
    @classmethod
    def _unpickled(cls, value: Any) -> Any:
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            return value
        try:
            return {name: cloudpickle.loads(base64.b64decode(blob)) for name, blob in value.items()}
        except Exception as exc:  # unpickling runs arbitrary imports: any error means "not loadable here"
            raise _UnloadableCoordinators(f"{type(exc).__name__}: {exc}") from exc


class _UnloadableCoordinators(RuntimeError):
    """A stored coordinator could not be unpickled (not a ValueError: pydantic passes it through)."""


def _table(coordinators: Mapping[str, Coordinator] | Sequence[Coordinator]) -> dict[str, Coordinator]:
    if isinstance(coordinators, Mapping):
        return dict(coordinators)
    table: dict[str, Coordinator] = {}
    for c in coordinators:
        name = getattr(c, "name", None)
        if not isinstance(name, str) or not name:
            raise RunConfigError(f"coordinator {c!r} has no name; give it a `name` attribute or pass a dict")
        if name in table:
            raise RunConfigError(f"two coordinators are named {name!r}; names must be unique")
        table[name] = c
    return table
