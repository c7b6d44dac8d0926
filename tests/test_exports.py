"""What each package exports, and why; and that tests, benchmarks and examples use only that.

``EXPORTS`` is the public surface, name by name, grouped with the reason the group is public.
A package's ``__all__`` must be exactly its list: adding or removing a public name means
editing this file and saying why. Public import paths are the package roots in ``EXPORTS``;
everything else (``actors.orchestrator.facade``, ``cluster.storage._writer``...) is internal
and may move.
"""

from __future__ import annotations
import __future__

import ast
import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

EXPORTS: dict[str, dict[str, list[str]]] = {
    "coordinators": {
        "DESIGN.md's contract": ["TransitionType", "StateTransition", "TransitionBatch", "CoordinatorResult", "Message",
                                 "AgentState", "ContextSnapshot", "Coordinator", "TransitionError", "reduce"],
        "the typed parts of AgentState (pending calls, sessions)": ["PendingToolCall", "Session"],
        "the orchestrator validates each new state sharing its predecessor's frozen records": ["shared_records"],
        "deep freezing: what snapshots are made of, for users who build their own views": [
            "freeze", "thaw", "FrozenDict", "FrozenList", "check_json_clean"],
    },
    "actors": {
        "DESIGN.md's contract": ["Orchestrator", "Change", "VersionConflict", "Call", "Result", "handoff",
                                 "parallel_handoff", "DEFAULT_MAX_PARALLEL", "HARD_MAX_PARALLEL", "ToolCaller",
                                 "ToolCallResult", "TextContent", "SkillRegistry", "ManagedAgent", "to_stored_record",
                                 "to_payload"],
        "the orchestrator's report (statistics()) and the Ray name of a named run's actor": [
            "OrchestratorStatistics", "actor_name"],
        "what a handoff reads of its run, and the pools/permits behind it (inspected by tests and benchmarks)": [
            "HandoffSettings", "HandoffTarget", "pool_for", "PoolStatistics", "WarmPermits"],
        "the pooled-caller protocol and the callers soloist ships": [
            "PooledCaller", "DiscoversTools", "Interruptible", "DEFAULT_POOL", "CompositeCaller", "OrchestratorCaller", "McpServer",
            "McpTool", "McpToolCaller", "close_mcp_sessions", "LlmCaller", "LlmConfig", "ChatInput", "ChatOutput",
            "chat", "tool_call_transitions"],
        "managed agents: the lifecycle union's members, its one guard and the projections": [
            "AgentConfig", "InitializingAgent", "IdleAgent", "RunningAgent", "ErrorAgent", "ClosedAgent",
            "ALLOWED_TRANSITIONS", "new_agent", "transition", "from_stored_record", "create_coordinator_actor",
            "coordinator_config"],
        "the run API for user-written coordinators: runs, typed events and outcomes, approvals, nested coordinators": [
            "Run", "RunConfig", "RunEvent", "RunOutcome", "Interrupt", "ApprovalRequest", "ask_approval", "merge_results",
            "MergedCoordinator"],
        "approvals are run-layer functions, one path for Run, `soloist approve` and the runs page": [
            "open_interrupts", "answer_interrupt"],
        "the run record a Run keeps in its state (status, open interrupts, each turn's reasoning and confidence), "
        "for reading history and stored states": ["RunRecord", "TurnNote", "RUN_RECORD_KEY", "read_record"],
        "tracing switches": ["tracing_available", "tracing_enabled", "set_tracing_enabled", "current_carrier"],
        "every error of actors.exceptions, so callers can catch it by type": [
            "WriteRefused", "OrchestratorClosed", "OrchestratorNotFound", "ChangesUnavailable", "NotJsonClean",
            "HandoffError", "EmptySkill", "HandoffInputError", "NoToolCaller", "CallerFailed", "SubagentLost",
            "ToolReportedError", "DecodingError", "IllegalLifecycleTransition", "AgentNotFound",
            "SkillRegistrationError", "UnknownTool", "AmbiguousTool", "NestedRunUnavailable", "McpError",
            "McpServerGone", "McpCallTimeout", "LlmError", "LlmConfigError", "LlmUnavailable", "LlmTimeout",
            "LlmRequestRejected", "LlmBadResponse", "PathOutsideRoot", "HistoryCompacted", "InterruptError",
            "InterruptNotOpen", "InterruptNotFound", "InterruptAlreadyAnswered", "RunConfigError", "RunStepError",
            "MergeConflict", "NotPicklable"],
    },
    "cluster": {
        "DESIGN.md's contract": ["connect"],
        "what connect() reports and the namespace soloist's named actors live in": ["ClusterInfo", "SOLOIST_NAMESPACE"],
        "the cluster-wide semaphore and its errors": [
            "ClusterSemaphore", "Lease", "SemaphoreStatistics", "SemaphoreTimeout", "SemaphoreUnavailable",
            "SemaphoreConfigConflict"],
        "the metrics endpoint": ["serve_metrics", "MetricsServer"],
        "log records as text or JSON with the component field": ["configure_logging", "JsonFormatter"],
        "the per-process registry (its statistics() shows what a process holds)": [
            "process_registry", "ProcessRegistry", "RegistryStatistics"],
    },
    "cluster.semaphore": {
        "the semaphore's client and its pure lease table (unit-tested without Ray)": [
            "ClusterSemaphore", "Lease", "SemaphoreStatistics", "HARD_MAX_PERMITS", "LeaseTable"],
        "the answer an actor holding guarded leases gives the semaphore's probe": ["held_by_this_process"],
    },
    "cluster.metrics": {
        "recording and serving the fixed metric names": [
            "METRICS", "MetricSpec", "BUCKETS", "serve_metrics", "MetricsServer", "flush", "enable", "disable",
            "enabled", "forget", "families", "render", "record_apply", "record_snapshot", "record_handoff",
            "record_semaphore_wait", "add_in_flight", "set_state_version", "record_subagent_call", "request_flush"],
        "the collector's totals, read by dashboards and tests": ["Aggregate", "MetricsDelta", "collector_handle"],
        "the cluster-wide totals as one scrape sees them (the runs page's in-flight chart)": [
            "read_totals", "handoffs_in_flight"],
    },
    "cluster.cli": {
        "the `soloist` command and the library calls behind its subcommands": [
            "main", "build_parser", "explore", "code_skill_registry", "collect_status", "render_table",
            "write_outputs"],
        "stdout kept for one JSON document (`--json`), Ray's output moved to stderr": ["stdout_reserved"],
    },
    "cluster.cli.ui": {
        "the runs page (`soloist ui`, `soloist run --ui`) and its server": [
            "add_ui_command", "start_run_page", "UiServer", "RunSource", "DEFAULT_PORT", "TOKEN_ENV", "TOKEN_HEADER"],
        "its guards (bind address, Host/Origin, token)": ["Guard", "check_bind"],
        "timeline entries: bounded views of committed changes": [
            "entry_from_change", "entry_from_journal", "reasoning_trail", "run_status", "MAX_TRANSITIONS",
            "MAX_DATA_CHARS"],
        "a headless Chromium for the page's tests and measurements": ["headless_chromium"],
        "its refusals": ["UiError", "ActionsDisabled", "ActionRefused", "BadToken", "CrossSiteRequest",
                         "RunNotFoundInUi", "UnsafeBind"],
    },
}

#: Public packages whose exact list lives with their own tests (built-ins, storage); here only
#: ``__all__`` == what they define is checked.
OWN_LISTS = ("cluster.storage", "actors.builtin", "coordinators.builtin")

#: Public import paths: the package roots above, plus these (their ``__all__`` is their surface).
PUBLIC_MODULES = set(EXPORTS) | set(OWN_LISTS)

#: White-box unit tests that must reach inside one module, each with its reason.
WHITE_BOX: dict[str, str] = {
    "tests/cluster/test_metrics.py": "drives a private recorder instance to test bucketing without the process-wide one",
    "tests/cluster/test_storage_sqlite.py": "patches the SQLite connection factory to simulate a full disk",
    "tests/reliability/test_faults.py": "swaps the group-commit writer's connection to inject write failures",
}


@pytest.mark.parametrize("package", sorted(EXPORTS))
def test_all_is_exactly_the_listed_public_names(package):
    module = importlib.import_module(package)
    listed = [name for names in EXPORTS[package].values() for name in names]
    assert len(listed) == len(set(listed)), "a name is listed twice"
    assert sorted(module.__all__) == sorted(listed)


@pytest.mark.parametrize("package", sorted(PUBLIC_MODULES))
def test_all_lists_exactly_the_public_names_the_package_defines(package):
    module = importlib.import_module(package)
    public = {name for name, value in vars(module).items()
              if not name.startswith("_") and not isinstance(value, __future__._Feature)}
    submodules = {name for name, value in vars(module).items() if type(value).__name__ == "module"}
    assert set(module.__all__) == public - submodules
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:
        assert getattr(module, name) is not None


def test_both_parallel_caps_are_four():
    from actors import DEFAULT_MAX_PARALLEL, HARD_MAX_PARALLEL

    assert DEFAULT_MAX_PARALLEL == HARD_MAX_PARALLEL == 4


def _soloist_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """``(line, module, name)`` of every import of a soloist package in ``path`` (name None: ``import m``)."""
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in {"actors", "cluster", "coordinators"}:
                found.extend((node.lineno, node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, None) for alias in node.names
                         if alias.name.split(".")[0] in {"actors", "cluster", "coordinators"})
    return found


def _private_import_problems(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    problems = []
    for line, module, name in _soloist_imports(path):
        where = f"{rel}:{line}"
        if module not in PUBLIC_MODULES:
            problems.append(f"{where} imports from {module}, which is not a public import path")
            continue
        if name is None or name == "*":
            continue
        exported = importlib.import_module(module).__all__
        if name not in exported and f"{module}.{name}" not in PUBLIC_MODULES:
            problems.append(f"{where} imports {name} from {module}, which does not export it")
    return problems


def test_tests_benchmarks_and_examples_import_only_public_names():
    problems = []
    for folder in ("tests", "benchmarks", "examples"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.relative_to(ROOT).as_posix() in WHITE_BOX:
                continue
            problems += _private_import_problems(path)
    assert problems == [], "use the package roots' public names (or export what is missing, deliberately):\n" + "\n".join(problems)


def test_the_import_scan_catches_a_private_import(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    sample = tmp_path / "sample.py"
    sample.write_text("from actors.orchestrator._actor import OrchestratorActor\nfrom actors import Orchestrator, _telemetry\n")
    problems = _private_import_problems(sample)
    assert len(problems) == 2 and "actors.orchestrator._actor" in problems[0] and "_telemetry" in problems[1]


@pytest.mark.parametrize("path", sorted(WHITE_BOX))
def test_every_white_box_exception_exists_and_has_a_reason(path):
    assert (ROOT / path).is_file() and WHITE_BOX[path].strip()
