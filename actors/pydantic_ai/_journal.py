"""The journal of agent steps lives in ``actors.agents._steps`` now (the OpenAI Agents SDK
adapter keeps its runs' steps the same way); its names stay importable from here."""

from actors.agents._steps import AgentJournal, RunSteps, StepRecord, current_steps, run_steps

__all__ = ["AgentJournal", "StepRecord", "RunSteps", "current_steps", "run_steps"]
