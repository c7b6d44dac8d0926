"""What runs inside Ray: the single-writer orchestrator, subagents, handoffs, managed agents."""

from actors.orchestrator.changes import Change
from actors.callers.composite import AmbiguousTool, CompositeCaller, UnknownTool
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
from actors.handoffs.api import Call, Result, handoff, parallel_handoff
from actors.callers.llm import LlmCaller, LlmConfig, tool_call_transitions
from actors.agents.coordinator_host import coordinator_config, create_coordinator_actor
from actors.agents.managed import AgentConfig, ManagedAgent, to_payload, to_stored_record
from actors.callers.mcp import McpServer, McpToolCaller
from actors.handoffs.pools import pool_for
from actors.orchestrator._json_clean import NotJsonClean
from actors.orchestrator.facade import DEFAULT_MAX_PARALLEL, HARD_MAX_PARALLEL, Orchestrator, actor_name
from actors.run import RunEvent, RunLoop, RunOutcome
from actors.callers.nested import OrchestratorCaller
from actors.callers.skills import SkillRegistrationError, SkillRegistry
from actors.callers.protocol import TextContent, ToolCaller, ToolCallResult

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
    "NotJsonClean",
    "AgentConfig",
    "create_coordinator_actor",
    "coordinator_config",
    "pool_for",
    "actor_name",
    "RunLoop",
    "RunEvent",
    "RunOutcome",
]
