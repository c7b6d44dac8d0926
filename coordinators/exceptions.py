"""Errors of the pure core, one class per meaning.

Malformed transitions are plain `ValueError`s raised at creation (the offending type and
field are in the message); `TransitionError` is for a well-formed transition that cannot
apply to the state it meets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinators.transitions import StateTransition

__all__ = ["SoloistError", "TransitionError"]


class SoloistError(Exception):
    """The root of every error soloist raises: ``except SoloistError`` catches soloist's own
    failures and nothing else. Each error also keeps the standard base that says what kind
    of failure it is (``ValueError``, ``LookupError``, ``RuntimeError``, ...), so code written
    against those goes on working."""


class TransitionError(SoloistError, ValueError):
    """Raised when `reduce` meets a transition that cannot apply to the current state.

    Examples: deleting a key that is not there, closing a session that is not open, a tool
    result for a call that is not pending. `reduce` is all-or-nothing, so when this is
    raised no new state exists and the input state is exactly as it was.

    Attributes:
        index: position of the failing transition in its batch (0-based).
        transition: the failing `StateTransition`.
        reason: what was wrong, without the position prefix.
    """

    def __init__(self, index: int, transition: StateTransition, reason: str) -> None:
        self.index = index
        self.transition = transition
        self.reason = reason
        kind = getattr(transition.transition_type, "value", transition.transition_type)
        super().__init__(f"transition {index} ({kind}) failed: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        # Crosses Ray: rebuild from the three attributes, not from the formatted message.
        return (type(self), (self.index, self.transition, self.reason))
