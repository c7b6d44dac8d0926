"""What runs inside Ray: the single-writer orchestrator, handoffs to subagents, tool callers,
managed agents and the run loop.

Every public name of the runtime is exported here (subpackages stay import-free so that
importing one module never drags in the layer above it). ``tests/test_exports.py`` lists
each name with the reason it is public.
"""

from actors.agents.coordinator_host import coordinator_config, coordinators_started_ahead, create_coordinator_actor
from actors.agents.managed import (
    ALLOWED_TRANSITIONS,
    AgentConfig,
    ClosedAgent,
    ErrorAgent,
    IdleAgent,
    InitializingAgent,
    ManagedAgent,
    RunningAgent,
    from_stored_record,
    new_agent,
    to_payload,
    to_stored_record,
    transition,
)
from actors.callers.composite import CompositeCaller
from actors.callers.llm import (
    ChatInput,
    ChatOutput,
    LlmCaller,
    LlmConfig,
    chat,
    tool_call_transitions,
)
from actors.callers.mcp import McpServer, McpTool, McpToolCaller, close_mcp_sessions
from actors.nested import OrchestratorCaller
from actors.callers.policy import PoolPolicy, ReplicaResources
from actors.callers.protocol import (
    DEFAULT_POOL,
    DEFAULT_RETIRE_AFTER_S,
    DiscoversTools,
    Interruptible,
    PooledCaller,
    RetiringPools,
    ScalingPools,
    SharedPools,
    TextContent,
    ToolCaller,
    ToolCallResult,
)
from actors.callers.skills import SkillRegistry
from coordinators.exceptions import SoloistError
from actors.exceptions import (
    AgentNotFound,
    AmbiguousTool,
    NotPicklable,
    CallerFailed,
    ChangesUnavailable,
    DecodingError,
    EmptySkill,
    HandoffError,
    HistoryCompacted,
    InterruptAlreadyAnswered,
    InterruptError,
    InterruptNotFound,
    InterruptNotOpen,
    MergeConflict,
    RunConfigError,
    RunStepError,
    HandoffInputError,
    IllegalLifecycleTransition,
    LlmBadResponse,
    LlmConfigError,
    LlmError,
    LlmRequestRejected,
    LlmTimeout,
    LlmUnavailable,
    McpCallTimeout,
    McpError,
    McpServerGone,
    NestedRunUnavailable,
    NotJsonClean,
    NoToolCaller,
    OrchestratorClosed,
    OrchestratorNotFound,
    RunHostFull,
    PathOutsideRoot,
    PoolConfigError,
    SkillRegistrationError,
    SubagentLost,
    ToolReportedError,
    UnknownTool,
    VersionConflict,
    WriteRefused,
)
from actors.handoffs._permits import WarmPermits
from actors.handoffs.api import Call, Result, decode_output, handoff, parallel_handoff
from actors.handoffs.pools import MAX_TRACKED_RUNS, PoolStatistics, PoolStatus, pool_for, pool_status
from actors.handoffs.replica import ReplicaLoad
from actors.handoffs.settings import HandoffSettings, HandoffTarget, effective_max_parallel
from actors.orchestrator.changes import Change
from actors.orchestrator.core import RunCore
from actors.orchestrator.facade import (
    DEFAULT_MAX_PARALLEL,
    HARD_MAX_PARALLEL,
    Orchestrator,
    actor_name,
)
from actors.orchestrator.hosts import HostedRunRecord, HostStatistics, host_statistics, hosted_runs, run_host_name
from actors.orchestrator.spec import OrchestratorStatistics
from actors.interrupts import RUN_RECORD_KEY, ApprovalRequest, Interrupt, RunRecord, TurnNote, ask_approval, read_record
from actors.approvals import answer_interrupt, open_interrupts
from actors.run import Run
from actors.run_config import RunConfig
from actors.run_events import RunEvent, RunOutcome
from actors.run_merge import MergedCoordinator, merge_results
from actors.telemetry import (
    current_carrier,
    set_tracing_enabled,
    tracing_available,
    tracing_enabled,
)

__all__ = [
    # the contract (docs/design.md)
    "Orchestrator", "Change", "VersionConflict", "Call", "Result", "handoff", "parallel_handoff",
    "DEFAULT_MAX_PARALLEL", "HARD_MAX_PARALLEL", "ToolCaller", "ToolCallResult", "TextContent",
    "SkillRegistry", "ManagedAgent", "to_stored_record", "to_payload",
    # orchestrator
    "OrchestratorStatistics", "actor_name", "RunCore",
    # run hosts
    "run_host_name", "HostStatistics", "HostedRunRecord", "host_statistics", "hosted_runs",
    # handoffs
    "decode_output", "HandoffSettings", "HandoffTarget", "pool_for", "PoolStatistics", "WarmPermits", "effective_max_parallel",
    # pools
    "PoolPolicy", "ReplicaResources", "ScalingPools", "SharedPools", "PoolConfigError", "ReplicaLoad", "PoolStatus", "pool_status",
    "MAX_TRACKED_RUNS",
    # callers
    "PooledCaller", "DiscoversTools", "Interruptible", "DEFAULT_POOL", "RetiringPools", "DEFAULT_RETIRE_AFTER_S",
    "CompositeCaller", "OrchestratorCaller",
    "McpServer", "McpTool", "McpToolCaller", "close_mcp_sessions",
    "LlmCaller", "LlmConfig", "ChatInput", "ChatOutput", "chat", "tool_call_transitions",
    # managed agents
    "AgentConfig", "InitializingAgent", "IdleAgent", "RunningAgent", "ErrorAgent", "ClosedAgent",
    "ALLOWED_TRANSITIONS", "new_agent", "transition", "from_stored_record",
    "create_coordinator_actor", "coordinator_config", "coordinators_started_ahead",
    # runs: the run API, approvals, nested coordinators
    "Run", "RunConfig", "RunEvent", "RunOutcome", "Interrupt", "ApprovalRequest", "ask_approval",
    "open_interrupts", "answer_interrupt",
    "RunRecord", "TurnNote", "RUN_RECORD_KEY", "read_record",
    "merge_results", "MergedCoordinator",
    # telemetry switches
    "tracing_available", "tracing_enabled", "set_tracing_enabled", "current_carrier",
    # errors (everything in actors.exceptions)
    "SoloistError", "WriteRefused", "OrchestratorClosed", "OrchestratorNotFound", "RunHostFull", "ChangesUnavailable", "NotJsonClean",
    "HandoffError", "EmptySkill", "HandoffInputError", "NoToolCaller", "CallerFailed", "SubagentLost",
    "ToolReportedError", "DecodingError", "IllegalLifecycleTransition", "AgentNotFound",
    "SkillRegistrationError", "UnknownTool", "AmbiguousTool", "NestedRunUnavailable",
    "McpError", "McpServerGone", "McpCallTimeout",
    "LlmError", "LlmConfigError", "LlmUnavailable", "LlmTimeout", "LlmRequestRejected", "LlmBadResponse",
    "PathOutsideRoot", "NotPicklable",
    "HistoryCompacted", "InterruptError", "InterruptNotOpen", "InterruptNotFound", "InterruptAlreadyAnswered",
    "RunConfigError", "RunStepError", "MergeConflict",
]
