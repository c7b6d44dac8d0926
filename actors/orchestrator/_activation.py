"""One activation of a run's writer, as an explicit lifecycle with one guard for transitions.

An activation is one writer object taking a run up (``OrchestratorActor``: on a dedicated
actor, a run host or in a ``RunCore``) until it stops writing it. Its stages, in order:

- ``claimed``: it holds the run's writer claim in the store (no other process writes it).
- ``fenced``: its fencing epoch is committed: an older activation never commits again.
- ``replayed``: its state is read back from the store (a new run: created there).
- ``serving``: it takes reads and writes.
- ``unloading``: it refuses writes, writes its last checkpoint and lets the store go.
- ``closed``: it never writes again (closed by its owner, unloaded, or superseded).

A stored run is fenced before it is replayed (what it reads is then the last version anybody
was acknowledged); a new run is created in the same commit as its epoch, so it is replayed
(created) first. A store that does not fence (memory, one process) goes from ``replayed`` to
``serving``; a run without a store serves at once.
"""

from __future__ import annotations

from typing import Literal

from coordinators.exceptions import SoloistError

__all__ = ["Activation", "IllegalActivationStage", "Stage"]

Stage = Literal["claimed", "fenced", "replayed", "serving", "unloading", "closed"]

#: The stages each stage may go to (None: the activation has not started).
_NEXT: dict[Stage | None, tuple[Stage, ...]] = {
    None: ("claimed", "serving"),
    "claimed": ("fenced", "replayed"),
    "fenced": ("replayed", "serving"),
    "replayed": ("fenced", "serving"),
    "serving": ("unloading", "closed"),  # closed at once: superseded by a newer activation
    "unloading": ("closed",),
    "closed": (),
}


class IllegalActivationStage(SoloistError, RuntimeError):
    """Raised when an activation is moved to a stage its lifecycle does not allow from where
    it is (a bug of the writer, never the caller's)."""


class Activation:
    """Where one activation is in its lifecycle, and the stages it went through."""

    __slots__ = ("_run", "stage", "path")

    def __init__(self, run: str) -> None:
        self._run = run
        self.stage: Stage | None = None  # moved only by ``enter``
        self.path: list[Stage] = []  # every stage entered, in order

    def enter(self, stage: Stage) -> None:
        """Move to ``stage`` (``IllegalActivationStage`` if it may not come next)."""
        allowed = _NEXT[self.stage]
        if stage not in allowed:
            raise IllegalActivationStage(
                f"run {self._run!r}: an activation at {self.stage or 'its start'} cannot go to {stage} "
                f"(only to {', '.join(allowed) or 'nothing'})"
            )
        self.stage = stage
        self.path.append(stage)

    @property
    def stopped(self) -> bool:
        """It refuses writes from now on (``unloading`` or ``closed``)."""
        return self.stage == "unloading" or self.stage == "closed"
