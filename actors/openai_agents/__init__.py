"""Durable OpenAI Agents SDK runs on soloist (the optional ``soloist[openai-agents]`` extra).

``await SoloistRunner(store=...).run(agent, input, run_id=...)`` is ``Runner.run`` with every
model request and every function-tool call a journalled step of a soloist run: a run
resumed after a crash (same ``run_id``) requests and runs nothing that was committed. The
user's ``Agent``, tools, handoffs and guardrails stay as written. Importing ``actors`` never
imports this package (nor the SDK's ``agents``).
"""

from actors.agents._durable_errors import DurableAgentConfigError, DurableAgentError, JournalMismatch, StepNotJournalable
from actors.agents._steps import AgentJournal, StepRecord
from actors.openai_agents.runner import SoloistRunner

__all__ = ["SoloistRunner", "AgentJournal", "StepRecord",
           "DurableAgentError", "DurableAgentConfigError", "JournalMismatch", "StepNotJournalable"]
