"""What can go wrong when a pydantic-ai agent runs on soloist.

Setup mistakes (an agent without a name, a model that cannot reach the cluster, a run whose
state cannot hold the journal) subclass ``ValueError``/``TypeError`` and are raised before
anything is sent; a replay that no longer matches its journal is a ``RuntimeError``.
"""

from __future__ import annotations

from coordinators.exceptions import SoloistError

__all__ = ["DurableAgentError", "DurableAgentConfigError", "JournalMismatch", "StepNotJournalable"]


class DurableAgentError(SoloistError):
    """Root of the errors of the pydantic-ai integration."""


class DurableAgentConfigError(DurableAgentError, ValueError):
    """Raised when a ``SoloistAgent`` cannot be built or cannot run as asked: the agent has no
    name, no model, a model that cannot be pickled and no ``model_factory``, a model given at
    run time, or an orchestrator whose state is not an ``AgentJournal``. The message names
    the offender and the fix."""


class JournalMismatch(DurableAgentError, RuntimeError):
    """Raised when a resumed agent asks for a step that its journal recorded differently (a
    tool call under the same key with another tool name): the agent's code or inputs changed
    since the steps were committed, so the journal cannot answer it. Start a new run id."""


class StepNotJournalable(DurableAgentError, TypeError):
    """Raised when a tool returned a value that cannot be journalled as JSON; the message
    names the tool. Return JSON-able values (pydantic models, dataclasses, dicts, str...)."""
