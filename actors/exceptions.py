"""Errors raised by the orchestrator and by handoffs.

One class per meaning. Setup mistakes subclass ``TypeError``/``ValueError``; failures at run
time subclass ``RuntimeError`` (or ``PermissionError`` for a refused write).
"""

from __future__ import annotations

__all__ = [
    "VersionConflict",
    "WriteRefused",
    "OrchestratorClosed",
    "OrchestratorNotFound",
    "ChangesUnavailable",
    "ApplyFailed",
    "HandoffError",
    "EmptySkill",
    "HandoffInputError",
    "NoToolCaller",
    "CallerFailed",
    "SubagentLost",
    "ToolReportedError",
    "DecodingError",
    "IllegalLifecycleTransition",
    "AgentNotFound",
    "NotPicklable",
]


class VersionConflict(RuntimeError):
    """Raised when ``apply_batch(expected_version=...)`` finds the state at another version.

    Nothing was applied. Take a fresh ``snapshot()``/``context()``, recompute, and retry.
    """

    def __init__(self, expected: int, actual: int) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"version conflict: expected version {expected}, the state is at version {actual}; "
            "nothing was applied - take a new snapshot and retry"
        )

    def __reduce__(self):  # keep both fields across Ray's pickling
        return (type(self), (self.expected, self.actual))


class WriteRefused(PermissionError):
    """Raised when a write reaches the orchestrator without its owner's token.

    Only the handle that created an orchestrator (or one it explicitly delegated with
    ``Orchestrator.delegate()``) may write; subagents and coordinators get read-only views.
    """


class OrchestratorClosed(RuntimeError):
    """Raised when a method is called on an orchestrator after ``close()``."""


class OrchestratorNotFound(LookupError):
    """Raised by ``Orchestrator.attach`` when no live actor and no stored run has that name."""


class ChangesUnavailable(RuntimeError):
    """Raised by ``subscribe(since=...)`` when changes that old are no longer retained."""


class ApplyFailed(RuntimeError):
    """Raised when an ``apply`` function failed with an exception that cannot cross processes.

    The state is unchanged; the message carries the original exception's type and text.
    """


class HandoffError(RuntimeError):
    """Base of every handoff failure; ``skill`` names the skill that was called."""

    def __init__(self, skill: str, message: str) -> None:
        self.skill = skill
        super().__init__(message)

    def __reduce__(self):
        return (_rebuild_handoff_error, (type(self), self.skill, str(self), self.__cause__))


def _rebuild_handoff_error(cls: type, skill: str, message: str, cause: BaseException | None) -> "HandoffError":
    err = cls.__new__(cls)
    HandoffError.__init__(err, skill, message)
    err.__cause__ = cause
    return err


class EmptySkill(HandoffError, ValueError):
    """Raised when a ``Call`` has an empty skill name (nothing was dispatched)."""


class HandoffInputError(HandoffError, TypeError):
    """Raised when a ``Call``'s input is not a pydantic model, a dict or None, or is not JSON-clean."""


class NoToolCaller(HandoffError):
    """Raised when the orchestrator has no ``ToolCaller`` to dispatch through."""


class CallerFailed(HandoffError):
    """Raised when the caller itself failed (exception, crash, lost subagent); the cause is chained."""


class SubagentLost(CallerFailed):
    """Raised when the subagent actor serving a call died or its node left the cluster."""


class ToolReportedError(HandoffError):
    """Raised when the tool answered with ``is_error``; the message carries the tool's text."""


class DecodingError(HandoffError):
    """Raised when a tool's output is not valid JSON for the handoff's ``out_type``."""


class IllegalLifecycleTransition(RuntimeError):
    """Raised when a managed agent is asked to move between two lifecycles the rules forbid
    (e.g. out of ``closed``); the agent is unchanged."""

    def __init__(self, agent_id: str, current: str, target: str, allowed: tuple[str, ...] = ()) -> None:
        self.agent_id = agent_id
        self.current = current
        self.target = target
        self.allowed = allowed
        super().__init__(
            f"agent {agent_id!r} cannot go from {current!r} to {target!r}; "
            f"from {current!r} it may go to: {', '.join(allowed) or 'nothing (terminal)'}"
        )

    def __reduce__(self):
        return (type(self), (self.agent_id, self.current, self.target, self.allowed))


class AgentNotFound(LookupError):
    """Raised by ``Orchestrator.agent_handle`` when the run has no agent with that id."""


class NotPicklable(TypeError):
    """Raised when an initial state, a caller or a skill cannot be pickled to travel to the
    cluster (``Orchestrator(...)``, ``SkillRegistry.register``).

    The message is one sentence naming the object that holds the unpicklable value and the
    fix: define the class or function at module level, or don't capture the value.
    """
