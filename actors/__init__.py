"""What runs inside Ray: the single-writer orchestrator, subagents, handoffs, managed agents."""

from actors.changes import Change
from actors.exceptions import (
    CallerFailed,
    DecodingError,
    EmptySkill,
    HandoffError,
    HandoffInputError,
    NoToolCaller,
    OrchestratorClosed,
    OrchestratorNotFound,
    SubagentLost,
    ToolReportedError,
    VersionConflict,
    WriteRefused,
)
from actors.handoff import Call, Result, handoff, parallel_handoff
from actors.orchestrator import DEFAULT_MAX_PARALLEL, HARD_MAX_PARALLEL, Orchestrator
from actors.skills import SkillRegistrationError, SkillRegistry
from actors.tools import TextContent, ToolCaller, ToolCallResult

__all__ = [
    "Orchestrator",
    "Change",
    "VersionConflict",
    "Call",
    "Result",
    "handoff",
    "parallel_handoff",
    "DEFAULT_MAX_PARALLEL",
    "HARD_MAX_PARALLEL",
    "ToolCaller",
    "ToolCallResult",
    "TextContent",
    "SkillRegistry",
    "SkillRegistrationError",
    "WriteRefused",
    "OrchestratorClosed",
    "OrchestratorNotFound",
    "HandoffError",
    "EmptySkill",
    "HandoffInputError",
    "NoToolCaller",
    "CallerFailed",
    "SubagentLost",
    "ToolReportedError",
    "DecodingError",
]
