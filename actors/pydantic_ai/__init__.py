"""Durable pydantic-ai agents on soloist (the optional ``soloist[pydantic-ai]`` extra).

``SoloistAgent(agent, store=...)`` runs an unchanged pydantic-ai ``Agent`` with every model
request and every tool call a journalled step of a soloist run: a run resumed after a
crash (same ``run_id``) requests and runs nothing that was committed. Importing ``actors``
never imports this package (nor pydantic-ai).
"""

from actors.agents._steps import AgentJournal, StepRecord
from actors.pydantic_ai.agent import SoloistAgent
from actors.pydantic_ai.exceptions import DurableAgentConfigError, DurableAgentError, JournalMismatch, StepNotJournalable

__all__ = ["SoloistAgent", "AgentJournal", "StepRecord",
           "DurableAgentError", "DurableAgentConfigError", "JournalMismatch", "StepNotJournalable"]
