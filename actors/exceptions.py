"""Everything that can go wrong in ``actors``: the orchestrator and its state, handoffs,
managed agents, tool callers (skills, composite, nested runs, MCP servers, the model
endpoint) and the built-in exploration tools.

One class per meaning. Setup mistakes subclass ``TypeError``/``ValueError``; failures at run
time subclass ``RuntimeError`` (or ``PermissionError`` for a refused write).
"""

from __future__ import annotations

from coordinators.exceptions import SoloistError

__all__ = [
    "PoolConfigError",
    "VersionConflict",
    "WriteRefused",
    "OrchestratorClosed",
    "OrchestratorNotFound",
    "RunHostFull",
    "ChangesUnavailable",
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
    "NotJsonClean",
    "SkillRegistrationError",
    "UnknownTool",
    "AmbiguousTool",
    "NestedRunUnavailable",
    "McpError",
    "McpServerGone",
    "McpCallTimeout",
    "LlmError",
    "LlmConfigError",
    "LlmUnavailable",
    "LlmTimeout",
    "LlmRequestRejected",
    "LlmBadResponse",
    "PathOutsideRoot",
    "HistoryCompacted",
    "InterruptError",
    "InterruptNotOpen",
    "InterruptNotFound",
    "InterruptAlreadyAnswered",
    "RunConfigError",
    "RunStepError",
    "MergeConflict",
    "NotPicklable",
]


class VersionConflict(SoloistError, RuntimeError):
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


class WriteRefused(SoloistError, PermissionError):
    """Raised when a write reaches the orchestrator without its owner's token.

    Only the handle that created an orchestrator (or one it explicitly delegated with
    ``Orchestrator.delegate()``) may write; subagents and coordinators get read-only views.
    """


class OrchestratorClosed(SoloistError, RuntimeError):
    """Raised when a method is called on an orchestrator after ``close()``."""


class RunHostFull(SoloistError, RuntimeError):
    """A new run was refused: the host its name maps to holds as many runs as it may
    (``SOLOIST_HOST_MAX_RUNS``). Nothing was started or stored."""


class OrchestratorNotFound(SoloistError, LookupError):
    """Raised by ``Orchestrator.attach`` when no live actor and no stored run has that name."""


class ChangesUnavailable(SoloistError, RuntimeError):
    """Raised by ``subscribe(since=...)`` when changes that old are no longer retained."""


class HandoffError(SoloistError, RuntimeError):
    """Base of every handoff failure; ``skill`` names the skill that was called."""

    def __init__(self, skill: str, message: str) -> None:
        self.skill = skill
        super().__init__(message)

    def __reduce__(self):
        return (_rebuild_handoff_error, (type(self), self.skill, str(self), self.__cause__))


def _rebuild_handoff_error(cls: type[HandoffError], skill: str, message: str, cause: BaseException | None) -> "HandoffError":
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


class IllegalLifecycleTransition(SoloistError, RuntimeError):
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


class AgentNotFound(SoloistError, LookupError):
    """Raised by ``Orchestrator.agent_handle`` when the run has no agent with that id."""


# ------------------------------------------------------------------ orchestrator state


class NotJsonClean(SoloistError, ValueError):
    """Raised when a state holds a value JSON cannot carry unchanged (``nan``, ``inf``)."""


# ------------------------------------------------------------------ tool callers


class SkillRegistrationError(SoloistError, TypeError):
    """Raised when a function cannot be registered as a skill; lists every problem found."""


class PoolConfigError(SoloistError, ValueError):
    """Raised at registration (or at a pool's first use, when Ray was not up at registration)
    when a pool policy or a skill's resources are invalid, or no node of the cluster can hold
    a replica; the message names the field. Nothing has started."""


class UnknownTool(SoloistError, LookupError):
    """Raised when no member of a ``CompositeCaller`` serves the tool name (lists the known ones)."""


class AmbiguousTool(SoloistError, LookupError):
    """Raised when more than one member serves the tool name; give one of them a prefix."""


class NestedRunUnavailable(SoloistError, RuntimeError):
    """Raised when the run an ``OrchestratorCaller`` hands calls to is not running.

    Start it with ``Orchestrator(..., name=run)`` (or attach it from its store) first.
    """


# ------------------------------------------------------------------ MCP servers


class McpError(SoloistError, RuntimeError):
    """Base of MCP transport failures (the server, not the tool, failed)."""


class McpServerGone(McpError):
    """Raised when the MCP server could not be reached or died while serving the call.

    The session is dropped; the next call starts (stdio) or reaches (HTTP) the server again.
    """


class McpCallTimeout(McpError):
    """Raised when an MCP server did not answer a call within ``call_timeout`` seconds.

    Not a ``TimeoutError``: handoffs read a ``TimeoutError`` from a subagent as their own
    ``Call.timeout`` expiring, which this is not.
    """


# ------------------------------------------------------------------ model endpoint


class LlmError(SoloistError, RuntimeError):
    """Base of failures of the model endpoint (the caller failed, not a tool)."""


class LlmConfigError(SoloistError, ValueError):
    """Raised when the base URL or model is missing or invalid; says which argument or variable to set."""


class LlmUnavailable(LlmError):
    """Raised when the endpoint kept answering 429/5xx (or was unreachable) after every retry."""


class LlmTimeout(LlmUnavailable):
    """Raised when the endpoint did not answer within ``timeout`` on every attempt."""


class LlmRequestRejected(LlmError):
    """Raised when the endpoint refused the request (4xx other than 429): check the model, key and input."""


class LlmBadResponse(LlmError):
    """Raised when a 2xx answer is not a chat-completions response."""


# ------------------------------------------------------------------ built-in exploration tools


class PathOutsideRoot(SoloistError, ValueError):
    """Raised when a path given to a skill is, or resolves (through a symlink), outside its root."""


# ---------------------------------------------------------------- history, runs, interrupts


class HistoryCompacted(SoloistError, LookupError):
    """Raised by ``Orchestrator.history``/``fork`` for a version older than the retention
    window: journal compaction removed it. ``earliest`` is the oldest version still kept."""

    def __init__(self, run: str, requested: int, earliest: int) -> None:
        self.run = run
        self.requested = requested
        self.earliest = earliest
        super().__init__(
            f"run {run!r}: version {requested} is no longer kept (journal compaction); the earliest version still kept "
            f"is {earliest} - ask for history(since={earliest}) or fork(at_version >= {earliest}), or keep more "
            "with Orchestrator(keep_versions=..., keep_days=...)"
        )

    def __reduce__(self):  # keep every field across Ray's pickling
        return (type(self), (self.run, self.requested, self.earliest))


class InterruptError(SoloistError, RuntimeError):
    """Base of the errors raised when an answer to an interrupt is refused; nothing was written."""


class InterruptNotOpen(InterruptError):
    """Raised by ``answer`` when the interrupt is not open in this run (unknown, another
    run's, or already answered). The state is unchanged."""


class InterruptNotFound(InterruptNotOpen):
    """Raised by ``answer`` when this run never opened that interrupt (a typo, or another run's id)."""


class InterruptAlreadyAnswered(InterruptNotOpen):
    """Raised by ``answer`` when the interrupt was answered before (answers are final)."""


class RunConfigError(SoloistError, ValueError):
    """Raised by ``Run(...)`` for a bad configuration (unknown coordinator names, bad limits),
    and by ``resume`` when the orchestrator's state holds no run to continue."""


class RunStepError(SoloistError, RuntimeError):
    """Raised when a coordinator returns something the run cannot use (not a
    ``CoordinatorResult``, a handoff to a coordinator the run does not have, a bad approval
    request); the message names the coordinator. Nothing of that step was committed."""


class MergeConflict(SoloistError, ValueError):
    """Raised by ``merge_results(..., on_conflict="error")`` when two results write the same
    state key or stage differently; names both coordinators and the key."""


class NotPicklable(SoloistError, TypeError):
    """Raised when an initial state, a caller or a skill cannot be pickled to travel to the
    cluster (``Orchestrator(...)``, ``SkillRegistry.register``).

    The message is one sentence naming the object that holds the unpicklable value and the
    fix: define the class or function at module level, or don't capture the value.
    """
