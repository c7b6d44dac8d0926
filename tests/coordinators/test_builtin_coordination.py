"""The coordination coordinator, from hand-built snapshots only (no Ray)."""

from __future__ import annotations

from typing import Any

from coordinators import AgentState, Message, TransitionBatch, reduce
from coordinators.builtin import CoordinationCoordinator, call_key
from tests.coordinators.builtin_fakes import ROOT, snap, state_with

# a phrase, not an identifier: exploration plans one literal search for it
TASK = {"type": "locate_definition", "keywords": ["widget factory"], "message": 'Where is "widget factory"?'}
LIST = ("list_tree", {"root": ROOT})
SEARCH = ("search_code", {"root": ROOT, "pattern": "widget factory", "max_hits": 50})


def made(*calls: tuple[str, dict[str, Any]]) -> list[str]:
    return [call_key(*call) for call in calls]


async def decide(state: AgentState) -> tuple[Any, AgentState]:
    result = await CoordinationCoordinator().process(snap(state), "task")
    return result, reduce(state, result.transitions)


def answered(state: AgentState, *calls: tuple[str, dict[str, Any], Any]) -> AgentState:
    """Plan ``calls`` the way exploration does and answer them with the given outputs."""
    batch = TransitionBatch()
    planned = dict(state.conversation_state.get("planned_calls", {}))
    for tool_name, arguments, _ in calls:
        batch.execute_tool(tool_name, arguments)
        planned[batch.transitions[-1].data["call_id"]] = {"tool_name": tool_name, "arguments": arguments}
    batch.update_state("planned_calls", planned)
    state = reduce(state, batch)
    results = TransitionBatch()
    for transition, (_, _, output) in zip(batch.transitions, calls):
        results.tool_result(transition.data["call_id"], output)
    return reduce(state, results)


async def test_unclassified_task_goes_to_classification() -> None:
    result, after = await decide(state_with())
    assert result.handoff_to == "classification" and result.should_continue
    assert after.conversation_stage == "initial"


async def test_pending_calls_go_to_safety_first() -> None:
    state = state_with("exploring", pending=[LIST], task=TASK)
    result, _ = await decide(state)
    assert result.handoff_to == "safety"
    assert result.reasoning == "1 call(s) still pending: safety checks them before they run"


async def test_exploring_while_searches_are_outstanding() -> None:
    result, after = await decide(state_with("exploring", task=TASK))
    assert result.handoff_to == "exploration"
    assert after.conversation_stage == "exploring"
    assert result.reasoning == "exploring: 2 call(s) to plan"


async def test_reading_once_every_search_is_answered() -> None:
    state = state_with("exploring", task=TASK, calls_made=made(LIST, SEARCH))
    hits = {"hits": [{"path": "w.py", "line": 3, "text": "# the widget factory", "symbol_kind": None}]}
    state = answered(state, (*LIST, {"entries": []}), (*SEARCH, hits))
    result, after = await decide(state)
    assert (result.handoff_to, after.conversation_stage) == ("exploration", "reading")
    assert result.reasoning == "reading: 2 result(s) to digest, 2 call(s) to plan"


async def test_stages_never_go_back() -> None:
    state = state_with("reading", task=TASK)  # searches not made, yet already reading
    result, after = await decide(state)
    assert after.conversation_stage == "reading" and result.handoff_to == "exploration"
    assert not [t for t in result.transitions if t.transition_type.value == "update_stage"]


async def test_nothing_left_moves_to_summarising_then_complete_with_a_summary() -> None:
    findings = [
        {"path": "pkg/w.py", "line": 3, "text": "class Widget:", "symbol_kind": "class", "via": "Widget"},
        {"path": "pkg/app.py", "line": 1, "text": "from pkg.w import Widget", "symbol_kind": None, "via": "Widget"},
    ]
    imports = [
        {"importer": "pkg.app", "imported": "pkg.w", "path": "pkg/app.py", "line": 1, "imported_path": "pkg/w.py"},
        {"importer": "pkg.app", "imported": "os", "path": "pkg/app.py", "line": 2, "imported_path": None},
    ]
    calls = made(LIST, SEARCH, ("read_excerpt", {"root": ROOT, "path": "pkg/w.py", "line": 3, "context": 5}),
                 ("read_excerpt", {"root": ROOT, "path": "pkg/app.py", "line": 1, "context": 5}),
                 ("python_imports", {"root": ROOT, "paths": ["pkg/app.py", "pkg/w.py"]}))
    state = state_with("reading", task=TASK, findings=findings, imports=imports, calls_made=calls,
                       trail=[{"coordinator": "exploration", "reasoning": "nothing new to explore"}])
    result, state = await decide(state)
    assert state.conversation_stage == "summarising"
    assert result.handoff_to == "coordination" and result.should_continue
    result, state = await decide(state)
    assert state.conversation_stage == "complete"
    assert not result.should_continue and result.handoff_to is None
    summary = state.conversation_state["summary"]
    assert summary["headline"] == [
        "Widget (class) defined at pkg/w.py:3", "pkg.app imports pkg.w at pkg/app.py:1",
    ]
    assert [d["ref"] for d in summary["definitions"]] == ["pkg/w.py:3"]
    assert [e["ref"] for e in summary["imports"]] == ["pkg/app.py:1"]  # only edges among the files involved
    assert [t["coordinator"] for t in summary["trail"]] == ["exploration", "coordination", "coordination"]
    assert summary["trail"] == state.conversation_state["trail"]
    result, _ = await decide(state)
    assert not result.should_continue and result.reasoning == "run already complete"


async def test_message_may_be_a_message_model() -> None:
    result = await CoordinationCoordinator().process(snap(state_with()), Message("user", "hi"))
    assert result.handoff_to == "classification"
