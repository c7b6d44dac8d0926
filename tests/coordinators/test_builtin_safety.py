"""The safety coordinator, from hand-built snapshots only (no Ray, no filesystem)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from coordinators import AgentState, ContextSnapshot, TransitionBatch, reduce
from coordinators.builtin import DEFAULT_RULES, SafetyCoordinator, SafetyRule
from tests.coordinators.builtin_fakes import ROOT, snap, state_with


def fact(path: str, size: int = 100, binary: bool = False, target: str | None = None) -> dict[str, Any]:
    return {
        "path": path, "size": size, "is_binary": binary, "is_symlink": target is not None,
        "symlink_target": target, "escapes_root": bool(target and target.startswith("/")),
    }


FILES = {
    "ok.py": fact("ok.py"),
    "big.py": fact("big.py", size=5_000_000),
    "logo.png": fact("logo.png", binary=True),
    "vendor": fact("vendor", target="/usr/lib/python3"),
    "alias.py": fact("alias.py", target="ok.py"),
}


def excerpt(path: str) -> tuple[str, dict[str, Any]]:
    return ("read_excerpt", {"root": ROOT, "path": path, "line": 1})


async def check(*calls: tuple[str, dict[str, Any]], **conversation: Any) -> tuple[Any, AgentState]:
    """Run safety over a state holding ``calls`` pending; return (result, state after)."""
    state = state_with("reading", pending=calls, files=FILES, **conversation)
    result = await SafetyCoordinator().process(snap(state), "task")
    return result, reduce(state, result.transitions)


def blocked_reasons(state: AgentState) -> dict[str, str]:
    return {b["arguments"].get("path") or b["arguments"].get("pattern"): b["reason"]
            for b in state.conversation_state.get("blocked", [])}


async def test_safe_calls_stay_pending() -> None:
    result, after = await check(excerpt("ok.py"), excerpt("alias.py"), ("list_tree", {"root": ROOT}))
    assert len(after.pending_tool_calls) == 3 and "blocked" not in after.conversation_state
    assert result.should_continue and result.handoff_to == "coordination"
    assert result.reasoning == "checked 3 pending call(s), blocked 0"


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../etc/passwd", "path_outside_root: path '../etc/passwd' is outside root '/repo'"),
        ("pkg/../../secret", "path_outside_root: path 'pkg/../../secret' is outside root '/repo'"),
        ("/etc/passwd", "path_outside_root: path '/etc/passwd' is outside root '/repo'"),
        ("/repository/x.py", "path_outside_root: path '/repository/x.py' is outside root '/repo'"),
        ("vendor/six.py", "symlink_escape: path 'vendor/six.py' goes through symlink 'vendor' "
                          "to '/usr/lib/python3', outside the root"),
        ("/repo/vendor", "symlink_escape: path '/repo/vendor' goes through symlink 'vendor' "
                         "to '/usr/lib/python3', outside the root"),
        ("big.py", "file_too_large: file 'big.py' is 5000000 bytes (limit 1000000)"),
        ("logo.png", "binary_file: file 'logo.png' is binary"),
        ("ok.py; rm -rf /", "shell_or_nul: argument 'path' contains shell metacharacters ('ok.py; rm -rf /')"),
    ],
)
async def test_unsafe_paths_are_blocked_with_the_reason(path: str, reason: str) -> None:
    result, after = await check(excerpt(path), excerpt("ok.py"))
    assert len(after.pending_tool_calls) == 1  # only ok.py is left to run
    assert blocked_reasons(after) == {path: reason}
    tool_message = after.messages[-1]
    assert tool_message.role == "tool" and tool_message.metadata["is_error"] is True
    assert json.loads(tool_message.content) == {"blocked": reason}
    assert result.should_continue and reason in result.reasoning


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"pattern": "(a+)+$", "regex": True}, "nests quantifiers"),
        ({"pattern": r"(\w+\s?)*x", "regex": True}, "nests quantifiers"),
        ({"pattern": "x" * 501}, "pattern is 501 characters (limit 500)"),
        ({"pattern": "a\x00b"}, "argument 'pattern' contains a NUL byte"),
        ({"pattern": "x", "glob": "*.py`id`"}, "argument 'glob' contains shell metacharacters"),
        ({"pattern": "x", "max_file_bytes": 10**9}, "max_file_bytes=1000000000 exceeds the limit"),
    ],
)
async def test_dangerous_search_arguments_are_blocked(arguments: dict[str, Any], reason: str) -> None:
    _, after = await check(("search_code", {"root": ROOT, **arguments}))
    assert not after.pending_tool_calls
    [entry] = after.conversation_state["blocked"]
    assert reason in entry["reason"]


async def test_regex_metacharacters_in_a_pattern_are_fine() -> None:
    _, after = await check(("search_code", {"root": ROOT, "pattern": r"^def (load|save)_\w+$", "regex": True}))
    assert len(after.pending_tool_calls) == 1


async def test_wrong_root_and_unknown_tool_are_blocked() -> None:
    _, after = await check(("search_code", {"root": "/", "pattern": "x"}), ("shell", {"cmd": "ls"}))
    reasons = sorted(b["reason"] for b in after.conversation_state["blocked"])
    assert reasons[0] == "root_argument: root argument '/' is not the run's root '/repo'"
    assert reasons[1].startswith("unknown_tool: tool 'shell' is not allowed")


async def test_every_broken_rule_is_reported_at_once() -> None:
    _, after = await check(excerpt("../x.png\x00"))
    [entry] = after.conversation_state["blocked"]
    assert entry["reason"].startswith("path_outside_root: ")
    assert "; shell_or_nul: argument 'path' contains a NUL byte" in entry["reason"]


async def test_missing_root_is_fatal() -> None:
    state = reduce(AgentState(), TransitionBatch().execute_tool(*excerpt("ok.py")))
    result = await SafetyCoordinator().process(ContextSnapshot.of(state), "task")
    assert not result.should_continue and result.handoff_to is None
    assert result.reasoning.startswith("stopping the run: root_missing: the run has no 'root' in its state")
    after = reduce(state, result.transitions)
    assert not after.pending_tool_calls  # the unverifiable call was blocked too


async def test_too_many_blocked_calls_stop_the_run_and_cancel_the_rest() -> None:
    earlier = [{"call_id": f"c{i}", "tool_name": "read_excerpt", "arguments": {}, "reason": "x"} for i in range(10)]
    result, after = await check(excerpt("../a"), excerpt("ok.py"), blocked=earlier)
    assert not result.should_continue and result.handoff_to is None
    assert "too_many_blocked: 11 calls blocked in this run (limit 10)" in result.reasoning
    assert not after.pending_tool_calls
    assert blocked_reasons(after)["ok.py"] == "cancelled: the run is stopping"
    assert len(after.conversation_state["blocked"]) == 12


async def test_rules_are_data_and_extensible() -> None:
    no_tests = SafetyRule(
        "no_tests", "fatal",
        lambda call, ctx: "tests are off limits" if str(call.arguments.get("path", "")).startswith("tests/") else None,
    )
    state = state_with("reading", pending=[excerpt("tests/test_x.py")], files=FILES)
    result = await SafetyCoordinator(rules=DEFAULT_RULES + (no_tests,)).process(snap(state), "task")
    assert not result.should_continue
    assert "no_tests: tests are off limits" in result.reasoning


async def test_no_pending_calls_is_a_quiet_pass() -> None:
    state = state_with("reading", files=FILES)
    result = await SafetyCoordinator().process(snap(state), "task")
    assert result.should_continue and result.reasoning == "checked 0 pending call(s), blocked 0"
    assert [t.data["key"] for t in result.transitions] == ["trail"]
