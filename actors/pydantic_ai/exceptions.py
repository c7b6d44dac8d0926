"""What can go wrong when a pydantic-ai agent runs on soloist: the errors both agent adapters
share (``actors.agents._durable_errors``), under the names this package exports."""

from __future__ import annotations

from actors.agents._durable_errors import DurableAgentConfigError, DurableAgentError, JournalMismatch, StepNotJournalable

__all__ = ["DurableAgentError", "DurableAgentConfigError", "JournalMismatch", "StepNotJournalable"]
