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
        "docs/design.md's contract": ["TransitionType", "StateTransition", "TransitionBatch", "CoordinatorResult", "Message",
                                      "AgentState", "ContextSnapshot", "Coordinator", "TransitionError", "reduce"],
        "the typed parts of AgentState (pending calls, sessions)": ["PendingToolCall", "Session"],
        "the root of every soloist error (defined here, the lowest layer; also exported by actors and cluster)": [
            "SoloistError"],
        "the orchestrator validates each new state sharing its predecessor's frozen records": ["shared_records"],
        "deep freezing: what snapshots are made of, for users who build their own views": [
            "freeze", "thaw", "FrozenDict", "FrozenList", "check_json_clean"],
    },
    "actors": {
        "docs/design.md's contract": ["Orchestrator", "Change", "VersionConflict", "Call", "Result", "handoff",
                                      "parallel_handoff", "DEFAULT_MAX_PARALLEL", "HARD_MAX_PARALLEL", "ToolCaller",
                                      "ToolCallResult", "TextContent", "SkillRegistry", "ManagedAgent", "to_stored_record",
                                      "to_payload"],
        "the orchestrator's report (statistics()) and the Ray name of a named run's actor": [
            "OrchestratorStatistics", "actor_name"],
        "one run's writer in this process without Ray: tests of coordinators, stores, activation and fencing": [
            "RunCore"],
        "the root of every soloist error, so `except SoloistError` needs no other import": ["SoloistError"],
        "the run hosts: which host holds a run, and what each holds (soloist status, the runs page, benchmarks)": [
            "run_host_name", "HostStatistics", "HostedRunRecord", "host_statistics", "hosted_runs"],
        "what a handoff reads of its run, and the pools/permits behind it (inspected by tests and benchmarks)": [
            "HandoffSettings", "HandoffTarget", "pool_for", "PoolStatistics", "WarmPermits"],
        "how a caller's answer becomes a handoff's typed output (for callers that answer in plain text)": [
            "decode_output"],
        "how a pool grows and shrinks, what its replicas reserve, and what it is doing across the cluster "
        "(soloist status, the runs page)": [
            "PoolPolicy", "ReplicaResources", "ScalingPools", "SharedPools", "PoolConfigError", "ReplicaLoad", "PoolStatus",
            "pool_status", "MAX_TRACKED_RUNS"],
        "the one cap rule (requested -> effective), so a display of a run's cap (the runs page) computes it as "
        "the run does": ["effective_max_parallel"],
        "the pooled-caller protocol and the callers soloist ships": [
            "PooledCaller", "DiscoversTools", "Interruptible", "DEFAULT_POOL", "CompositeCaller", "OrchestratorCaller", "McpServer",
            "McpTool", "McpToolCaller", "close_mcp_sessions", "LlmCaller", "LlmConfig", "ChatInput", "ChatOutput",
            "chat", "tool_call_transitions"],
        "how long an idle subagent replica stays up (a caller may say; SkillRegistry(retire_after_s=...))": [
            "RetiringPools", "DEFAULT_RETIRE_AFTER_S"],
        "managed agents: the lifecycle union's members, its one guard and the projections": [
            "AgentConfig", "InitializingAgent", "IdleAgent", "RunningAgent", "ErrorAgent", "ClosedAgent",
            "ALLOWED_TRANSITIONS", "new_agent", "transition", "from_stored_record", "create_coordinator_actor",
            "coordinator_config"],
        "a driver that knows its coordinators starts their actors ahead of its run (the main job does)": [
            "coordinators_started_ahead"],
        "the run API for user-written coordinators: runs, typed events and outcomes, approvals, nested coordinators": [
            "Run", "RunConfig", "RunEvent", "RunOutcome", "Interrupt", "ApprovalRequest", "ask_approval", "merge_results",
            "MergedCoordinator"],
        "approvals are run-layer functions, one path for Run, `soloist approve` and the runs page": [
            "open_interrupts", "answer_interrupt"],
        "the run record a Run keeps in its state (status, open interrupts, each turn's reasoning and confidence), "
        "for reading history and stored states": ["RunRecord", "TurnNote", "RUN_RECORD_KEY", "read_record"],
        "tracing switches": ["tracing_available", "tracing_enabled", "set_tracing_enabled", "current_carrier"],
        "every error of actors.exceptions, so callers can catch it by type": [
            "WriteRefused", "OrchestratorClosed", "OrchestratorNotFound", "RunHostFull", "ChangesUnavailable", "NotJsonClean",
            "HandoffError", "EmptySkill", "HandoffInputError", "NoToolCaller", "CallerFailed", "SubagentLost",
            "ToolReportedError", "DecodingError", "IllegalLifecycleTransition", "AgentNotFound",
            "SkillRegistrationError", "UnknownTool", "AmbiguousTool", "NestedRunUnavailable", "McpError",
            "McpServerGone", "McpCallTimeout", "LlmError", "LlmConfigError", "LlmUnavailable", "LlmTimeout",
            "LlmRequestRejected", "LlmBadResponse", "PathOutsideRoot", "HistoryCompacted", "InterruptError",
            "InterruptNotOpen", "InterruptNotFound", "InterruptAlreadyAnswered", "RunConfigError", "RunStepError",
            "MergeConflict", "NotPicklable"],
    },
    "actors.pydantic_ai": {
        "pydantic-ai agents on soloist (the optional `soloist[pydantic-ai]` extra): the durable wrapper, and the "
        "journal state its runs keep (a run of your own that hosts agent runs starts from an AgentJournal)": [
            "SoloistAgent", "AgentJournal", "StepRecord"],
        "its errors, so callers can catch them by type": [
            "DurableAgentError", "DurableAgentConfigError", "JournalMismatch", "StepNotJournalable"],
    },
    "actors.openai_agents": {
        "OpenAI Agents SDK agents on soloist (the optional `soloist[openai-agents]` extra): the durable runner, and "
        "the journal state its runs keep (the same classes as actors.pydantic_ai's)": [
            "SoloistRunner", "AgentJournal", "StepRecord"],
        "its errors (the same classes as actors.pydantic_ai's), so callers can catch them by type": [
            "DurableAgentError", "DurableAgentConfigError", "JournalMismatch", "StepNotJournalable"],
    },
    "cluster": {
        "docs/design.md's contract": ["connect"],
        "what connect() reports and the namespace soloist's named actors live in": ["ClusterInfo", "SOLOIST_NAMESPACE"],
        "the root of every soloist error, so `except SoloistError` needs no other import": ["SoloistError"],
        "the cluster-wide semaphore and its errors": [
            "ClusterSemaphore", "Lease", "SemaphoreStatistics", "SemaphoreTimeout", "SemaphoreUnavailable",
            "SemaphoreConfigConflict"],
        "the metrics endpoint": ["serve_metrics", "MetricsServer"],
        "log records as text or JSON with the component field": ["configure_logging", "JsonFormatter"],
        "the per-process registry (its statistics() shows what a process holds)": [
            "process_registry", "ProcessRegistry", "RegistryStatistics"],
        "the cluster-wide budget of subagent replicas, and the replicas up per pool in Ray's own table (what tests "
        "and benchmarks count from outside)": [
            "ReplicaBudget", "replica_budget", "set_replica_budget", "live_replica_names", "replicas_per_pool",
            "acquire_replica_place"],
    },
    "cluster.semaphore": {
        "the semaphore's client and its pure lease table (unit-tested without Ray)": [
            "ClusterSemaphore", "Lease", "SemaphoreStatistics", "HARD_MAX_PERMITS", "LeaseTable"],
        "the few service actors that hold every scope's table, and their report": ["SERVICE_COUNT", "ServiceStatistics"],
        "the answer an actor holding guarded leases gives the semaphore's probe": ["held_by_this_process"],
        "the answer an owner of guarded leases gives a restarted semaphore service": ["renew_held_leases"],
        "budgets per scope (requests and tokens per sliding window), their pure window (unit-tested without Ray) "
        "and its errors": ["Budget", "BudgetConfigError", "BudgetStatistics", "BudgetWindow", "budget_of"],
        "a model endpoint as a scope shared by every run, and the usage hook model paths call (LlmCaller, the "
        "pydantic-ai and OpenAI Agents adapters' model subagents)": [
            "ModelEndpoint", "ModelCall", "TokenUsage", "UsageMeter", "endpoint_scope", "report_usage", "metered",
            "current_meter"],
    },
    "cluster.metrics": {
        "recording and serving the fixed metric names": [
            "METRICS", "MetricSpec", "BUCKETS", "serve_metrics", "MetricsServer", "flush", "enable", "disable",
            "enabled", "forget", "families", "render", "record_apply", "record_snapshot", "record_handoff",
            "record_semaphore_wait", "add_in_flight", "set_state_version", "record_subagent_call", "record_queue_wait", "add_replicas", "request_flush"],
        "the collector's totals, read by dashboards and tests": ["Aggregate", "MetricsDelta", "collector_handle"],
        "the cluster-wide totals as one scrape sees them (the runs page's in-flight chart)": [
            "read_totals", "handoffs_in_flight"],
        "model calls' tokens and requests, budget waits, and their totals by model and by run (soloist status, tests)": [
            "record_llm_request", "record_budget_wait", "record_run_tokens", "TokenTotals", "llm_token_totals",
            "run_token_totals"],
    },
    "cluster.cli": {
        "the `soloist` command and the library calls behind its subcommands": [
            "main", "build_parser", "explore", "code_skill_registry", "collect_status"],
        "`soloist status`'s report and how it is rendered (a test renders the pools it found)": [
            "StatusReport", "render_status"],
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
OWN_LISTS = ("cluster.storage", "actors.builtin", "coordinators.builtin",
             "cluster.storage.pg_server")  # throw-away PostgreSQL servers: the tests' and the benchmarks'


#: Public import paths: the package roots above, plus these (their ``__all__`` is their surface).
PUBLIC_MODULES = set(EXPORTS) | set(OWN_LISTS)

#: White-box unit tests that must reach inside one module, each with its reason (both scans skip them).
WHITE_BOX: dict[str, str] = {
    "tests/cluster/test_metrics.py": "swaps the process's metrics recorder for one without its push thread, to read "
                                     "what recording keeps locally before any flush",
}

#: Modules only the ``soloist`` command (``cluster/cli``) may import besides the public paths,
#: each with the reason it is not public.
CLI_ONLY: dict[str, str] = {
    "cluster.local_cluster": "the record of the Ray head `soloist up` started; only `up`, `down` and `run` read it",
    "coordinators.builtin.model": "the model-backed coordinators of `soloist run --llm`; it builds on the "
                                  "coordinators.builtin root, so the root cannot re-export it without a cycle",
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
    names = {name: getattr(module, name) for name in dir(module)}  # dir(): names a package loads lazily too
    public = {name for name, value in names.items()
              if not name.startswith("_") and not isinstance(value, type(__future__.annotations))}
    submodules = {name for name, value in names.items() if type(value).__name__ == "module"}
    assert set(module.__all__) == public - submodules
    assert len(module.__all__) == len(set(module.__all__))


def test_both_parallel_caps_are_four():
    from actors import DEFAULT_MAX_PARALLEL, HARD_MAX_PARALLEL

    assert DEFAULT_MAX_PARALLEL == HARD_MAX_PARALLEL == 4


def test_the_parallel_ceiling_is_the_semaphores_and_one_rule_turns_a_request_into_a_cap():
    from actors import DEFAULT_MAX_PARALLEL, HARD_MAX_PARALLEL, effective_max_parallel
    from cluster.semaphore import HARD_MAX_PERMITS

    assert HARD_MAX_PARALLEL == HARD_MAX_PERMITS
    requested = [-3, 0, 1, 3, HARD_MAX_PERMITS, HARD_MAX_PERMITS + 1, 100]
    assert [effective_max_parallel(n) for n in requested] == [DEFAULT_MAX_PARALLEL, DEFAULT_MAX_PARALLEL, 1, 3,
                                                              HARD_MAX_PERMITS, HARD_MAX_PERMITS, HARD_MAX_PERMITS]


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


def _private_import_problems(path: Path, *, also: frozenset[str] = frozenset()) -> list[str]:
    """Imports of soloist modules that are not public import paths (or of names they do not
    export). ``also``: further modules (and packages, with their submodules) allowed here."""
    rel = path.relative_to(ROOT).as_posix()
    problems = []
    for line, module, name in _soloist_imports(path):
        where = f"{rel}:{line}"
        if any(module == a or module.startswith(a + ".") for a in also):
            continue
        if module not in PUBLIC_MODULES:
            problems.append(f"{where} imports from {module}, which is not a public import path")
            continue
        if name is None or name == "*":
            continue
        exported = importlib.import_module(module).__all__
        if name not in exported and f"{module}.{name}" not in PUBLIC_MODULES:
            problems.append(f"{where} imports {name} from {module}, which does not export it")
    return problems


# Standard-library functions whose documented names start with an underscore.
_PUBLIC_STDLIB = {("os", "_exit")}


def _private_attribute_problems(path: Path) -> list[str]:
    """Every ``x._name`` where ``x`` is not ``self``/``cls`` (dunders such as ``__ray_call__``
    are allowed): reaching into an object's internals instead of its public API."""
    rel = path.relative_to(ROOT).as_posix()
    problems = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") and node.attr.endswith("__"):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
            continue
        if isinstance(node.value, ast.Name) and (node.value.id, node.attr) in _PUBLIC_STDLIB:
            continue
        problems.append(f"{rel}:{node.lineno} reads {ast.unparse(node.value)}.{node.attr}")
    return problems


def _sources(*folders: str) -> list[Path]:
    """The Python files under ``folders``, but the white-box tests."""
    return [path for folder in folders for path in sorted((ROOT / folder).rglob("*.py"))
            if path.relative_to(ROOT).as_posix() not in WHITE_BOX]


def test_tests_benchmarks_and_examples_import_only_public_names():
    problems = [p for path in _sources("tests", "benchmarks", "examples") for p in _private_import_problems(path)]
    assert problems == [], "use the package roots' public names (or export what is missing, deliberately):\n" + "\n".join(problems)


def test_tests_benchmarks_and_examples_touch_no_private_attribute():
    problems = [p for path in _sources("tests", "benchmarks", "examples") for p in _private_attribute_problems(path)]
    assert problems == [], "use the public API (or add what is missing to it, deliberately):\n" + "\n".join(problems)


def test_the_command_line_uses_only_public_names_of_the_layers_below():
    # cluster/cli is the application on top: its own modules are its business; of actors,
    # coordinators and the cluster infrastructure it uses what a user could use.
    allowed = frozenset({"cluster.cli", *CLI_ONLY})
    problems = [p for path in _sources("cluster/cli") for p in _private_import_problems(path, also=allowed)]
    assert problems == [], "the command line imports only public names (or CLI_ONLY, with its reason):\n" + "\n".join(problems)


def test_the_scans_catch_a_private_import_and_a_private_attribute(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    sample = tmp_path / "sample.py"
    sample.write_text("from actors.orchestrator._actor import OrchestratorActor\nfrom actors import Orchestrator, _telemetry\n"
                      "pid = orch._actor.__ray_call__.remote(f)\nx = self._ok + cls._ok + orch.__class__.__name__\n"
                      "await orch._agent_created('a')\n")
    problems = _private_import_problems(sample)
    assert len(problems) == 2 and "actors.orchestrator._actor" in problems[0] and "_telemetry" in problems[1]
    assert sorted(_private_attribute_problems(sample)) == [
        "sample.py:3 reads orch._actor", "sample.py:5 reads orch._agent_created"]
    assert _private_import_problems(sample, also=frozenset({"actors"})) == []


@pytest.mark.parametrize("module", sorted(CLI_ONLY))
def test_every_command_line_only_module_is_imported_by_the_command_line(module):
    # A stale entry would allow an import nobody makes any more.
    importers = [path for path in _sources("cluster/cli") if any(m == module for _, m, _ in _soloist_imports(path))]
    assert importers, f"{module} is in CLI_ONLY but nothing in cluster/cli imports it: remove the entry"


@pytest.mark.parametrize("path", sorted(WHITE_BOX))
def test_every_white_box_exception_still_reaches_inside(path):
    # A white-box file that no longer touches anything private must leave the list (and be scanned).
    assert _private_attribute_problems(ROOT / path) or _private_import_problems(ROOT / path), f"{path}: remove it from WHITE_BOX"

