"""What can go wrong when a framework's agent runs durably on soloist (both adapters).

Setup mistakes (an agent without a name, a model that cannot reach the cluster, a run whose
state cannot hold the journal) subclass ``ValueError``/``TypeError`` and are raised before
anything is sent; a replay that no longer matches its journal is a ``RuntimeError``. The
adapters (``actors.pydantic_ai``, ``actors.openai_agents``) export these same classes, so
``except DurableAgentConfigError`` catches the mistakes of either.
"""

from __future__ import annotations

from coordinators.exceptions import SoloistError

__all__ = ["DurableAgentError", "DurableAgentConfigError", "JournalMismatch", "StepNotJournalable"]


class DurableAgentError(SoloistError):
    """Root of the errors of the agent framework adapters."""


class DurableAgentConfigError(DurableAgentError, ValueError):
    """Raised when a durable agent cannot be built or cannot run as asked: the agent has no
    name, no model, a model that cannot be pickled and no model factory, a model given at
    run time, a starting agent that is not an agent, or an orchestrator whose state is not an
    ``AgentJournal``. The message names the offender and the fix."""


class JournalMismatch(DurableAgentError, RuntimeError):
    """Raised when a resumed agent asks for a step that its journal recorded differently (a
    tool call under the same key with another tool name, a model request of another agent):
    the agent's code or inputs changed since the steps were committed, so the journal cannot
    answer it. Start a new run id."""


class StepNotJournalable(DurableAgentError, TypeError):
    """Raised when a tool returned a value that cannot be journalled as JSON; the message
    names the tool. Return JSON-able values (pydantic models, dataclasses, dicts, str...)."""
