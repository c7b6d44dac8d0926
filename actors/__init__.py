"""What runs inside Ray: the single-writer orchestrator, subagents, handoffs, managed agents."""

from actors.changes import Change
from actors.composite_caller import AmbiguousTool, CompositeCaller, UnknownTool
from actors.exceptions import (
    AgentNotFound,
    NotPicklable,
    CallerFailed,
    DecodingError,
    EmptySkill,
    HandoffError,
    HandoffInputError,
    IllegalLifecycleTransition,
    NoToolCaller,
    OrchestratorClosed,
    OrchestratorNotFound,
    SubagentLost,
    ToolReportedError,
    VersionConflict,
    WriteRefused,
)
from actors.handoff import Call, Result, handoff, parallel_handoff
from actors.llm import LlmCaller, LlmConfig, tool_call_transitions
from actors.managed import ManagedAgent, to_payload, to_stored_record
from actors.mcp_caller import McpServer, McpToolCaller
from actors.orchestrator import DEFAULT_MAX_PARALLEL, HARD_MAX_PARALLEL, Orchestrator
from actors.orchestrator_caller import OrchestratorCaller
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
    "ManagedAgent",
    "to_stored_record",
    "to_payload",
    "SkillRegistrationError",
    "McpServer",
    "McpToolCaller",
    "CompositeCaller",
    "UnknownTool",
    "AmbiguousTool",
    "OrchestratorCaller",
    "LlmCaller",
    "LlmConfig",
    "tool_call_transitions",
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
    "IllegalLifecycleTransition",
    "AgentNotFound",
    "NotPicklable",
]
