"""The exploration coordinator, from hand-built snapshots only (no Ray)."""

from __future__ import annotations

from typing import Any

from tests.coordinators.builtin_fakes import ROOT, answer_pending, planned_calls, search_output, snap, state_with, table

from coordinators import AgentState, reduce
from coordinators.builtin import ExplorationCoordinator, call_key

TASK = {"type": "locate_definition", "keywords": ["Widget", "make_widget", "render", "theme", "colour"]}
FILES = {
    "pkg/__init__.py": {"path": "pkg/__init__.py", "size": 0, "is_binary": False, "is_symlink": False},
    "pkg/widgets.py": {"path": "pkg/widgets.py", "size": 900, "is_binary": False, "is_symlink": False},
    "pkg/app.py": {"path": "pkg/app.py", "size": 400, "is_binary": False, "is_symlink": False},
    "pkg/logo.py": {"path": "pkg/logo.py", "size": 10, "is_binary": True, "is_symlink": False},
}


IMPORTERS = {
    "results": [{
        "symbol": "Widget", "kind": "symbol", "modules": ["pkg.widgets"],
        "definitions": [{"module": "pkg.widgets", "path": "pkg/widgets.py", "line": 3, "kind": "class"}],
        "reexports": [{"module": "pkg", "source": "pkg.widgets", "path": "pkg/__init__.py", "line": 1, "public": True}],
        "importers": [
            {"importer": "pkg", "imported": "pkg.widgets", "path": "pkg/__init__.py", "line": 1, "how": "from"},
            {"importer": "pkg.app", "imported": "pkg.widgets", "path": "pkg/app.py", "line": 1, "how": "from"},
        ],
        "truncated": False,
    }],
    "parsed": 3,
}


def hit(path: str, line: int, kind: str | None = None, text: str = "...") -> dict[str, Any]:
    return {"path": path, "line": line, "text": text, "symbol_kind": kind}


SEARCHES = {
    "Widget": [hit("pkg/app.py", 7), hit("pkg/widgets.py", 3, "class"), hit("pkg/logo.py", 1, "class")],
    "make_widget": [hit("pkg/widgets.py", 20, "def"), hit("pkg/app.py", 9)],
}


def outputs(tool_name: str, arguments: dict[str, Any]) -> tuple[Any, bool]:
    if tool_name == "search_code":
        return search_output(SEARCHES, arguments), False
    if tool_name == "read_excerpt":
        line = arguments["line"]
        return {"path": arguments["path"], "start_line": max(1, line - 5), "end_line": line + 5, "lines": []}, False
    return table({
        "list_tree": {"entries": list(FILES.values()), "truncated": False},
        "find_importers": IMPORTERS,
        "python_imports": {
            "edges": [
                {"importer": "pkg.app", "imported": "pkg.widgets", "path": "pkg/app.py", "line": 1},
                {"importer": "pkg.other", "imported": "json", "path": "pkg/other.py", "line": 1},
            ],
            "modules": {"pkg.app": "pkg/app.py", "pkg.widgets": "pkg/widgets.py"},
        },
    })(tool_name, arguments)


async def turn(state: AgentState) -> tuple[AgentState, list[tuple[str, dict[str, Any]]], Any]:
    """One exploration turn, then the fake executor answers what it planned."""
    result = await ExplorationCoordinator().process(snap(state), "task")
    state = reduce(state, result.transitions)
    return answer_pending(state, outputs), planned_calls(result), result


async def test_first_turn_lists_the_tree_and_searches_best_keywords_first() -> None:
    state = state_with("exploring", task=TASK)
    result = await ExplorationCoordinator().process(snap(state), "task")
    definitions = r"^\s*(?:async\s+def|def|class)\s+{0}\b|^{0}\s*(?::[^=]*)?=(?!=)"
    search = {"root": ROOT, "max_hits": 50, "regex": True}
    assert planned_calls(result) == [
        ("list_tree", {"root": ROOT}),
        ("find_importers", {"root": ROOT, "symbols": ["Widget", "make_widget", "render", "theme"]}),
        ("search_code", {**search, "pattern": definitions.format("Widget")}),
        ("search_code", {**search, "pattern": r"\bWidget\b"}),
    ]
    assert result.handoff_to == "safety"
    assert result.reasoning == (
        "planned 4 call(s): list_tree(), find_importers('Widget', 'make_widget', 'render', 'theme'), "
        "search_code(definitions of 'Widget'), search_code(uses of 'Widget')"
    )
    after = reduce(state, result.transitions)
    assert after.conversation_state["calls_made"] == [call_key(*call) for call in planned_calls(result)]
    assert set(after.conversation_state["planned_calls"]) == set(after.pending_tool_calls)


async def test_a_phrase_is_searched_literally() -> None:
    state = state_with("exploring", task={"keywords": ["retry policy"]})
    result = await ExplorationCoordinator().process(snap(state), "task")
    assert planned_calls(result)[1] == ("search_code", {"root": ROOT, "max_hits": 50, "pattern": "retry policy"})


async def test_never_repeats_a_call_across_turns_and_stops_when_nothing_new() -> None:
    state = state_with("exploring", task=TASK)
    seen: list[str] = []
    reasonings = []
    for _ in range(6):
        state, calls, result = await turn(state)
        reasonings.append(result.reasoning)
        keys = [call_key(*call) for call in calls]
        assert not set(keys) & set(seen), f"repeated {set(keys) & set(seen)}"
        assert len(calls) <= 4
        seen += keys
        if not calls:
            break
    assert reasonings[-1].endswith("nothing new to explore") and result.handoff_to == "coordination"
    assert state.conversation_state["calls_made"] == seen
    again = await ExplorationCoordinator().process(snap(state), "task")
    assert planned_calls(again) == [] and again.reasoning == "nothing new to explore"


async def test_reads_definitions_first_then_follows_imports() -> None:
    state = state_with("exploring", task=TASK)
    tools: list[list[str]] = []
    calls: list = []
    while not any(name == "read_excerpt" for name, _ in calls):
        state, calls, _ = await turn(state)
        tools.append([name for name, _ in calls])
    # 1 listing, 1 import graph, 10 searches (definitions and uses of 5 keywords), 4 a turn;
    # excerpts wait for all searches
    assert tools[:3] == [["list_tree", "find_importers"] + ["search_code"] * 2, ["search_code"] * 4, ["search_code"] * 4]
    assert calls == [
        ("read_excerpt", {"root": ROOT, "path": "pkg/widgets.py", "line": 3, "context": 5}),
        ("read_excerpt", {"root": ROOT, "path": "pkg/widgets.py", "line": 20, "context": 5}),
        ("read_excerpt", {"root": ROOT, "path": "pkg/app.py", "line": 7, "context": 5}),
        ("python_imports", {"root": ROOT, "paths": ["pkg/app.py", "pkg/widgets.py"]}),
    ]  # the binary pkg/logo.py is never read; app.py:9 is inside the app.py:7 excerpt
    state, calls, result = await turn(state)
    assert calls == [] and result.reasoning.endswith("nothing new to explore")
    conversation = state.conversation_state
    assert [(e["path"], e["start_line"]) for e in conversation["excerpts"]] == [
        ("pkg/widgets.py", 1), ("pkg/widgets.py", 15), ("pkg/app.py", 2),
    ]
    assert conversation["imports"] == [{
        "importer": "pkg.app", "imported": "pkg.widgets", "path": "pkg/app.py", "line": 1,
        "imported_path": "pkg/widgets.py",
    }]
    assert {(f["path"], f["line"], f["via"]) for f in conversation["findings"]} >= {
        ("pkg/widgets.py", 3, "Widget"), ("pkg/widgets.py", 20, "make_widget"),
    }


async def test_blocked_and_failed_results_are_digested_not_retried() -> None:
    state = state_with("exploring", task={"keywords": ["Widget"]})
    result = await ExplorationCoordinator().process(snap(state), "task")
    state = reduce(state, result.transitions)
    state = answer_pending(state, lambda name, args: ({"blocked": "path_outside_root: no"}, True))
    result = await ExplorationCoordinator().process(snap(state), "task")
    assert planned_calls(result) == []
    assert "list_tree blocked: path_outside_root: no" in result.reasoning
    assert "search_code blocked" in result.reasoning
    after = reduce(state, result.transitions)
    assert len(after.conversation_state["digested_calls"]) == 4  # list_tree, find_importers, 2 searches


async def test_without_root_nothing_is_planned() -> None:
    state = AgentState(conversation_state={"task": TASK})
    result = await ExplorationCoordinator().process(snap(state), "task")
    assert planned_calls(result) == [] and result.handoff_to == "coordination"
    assert "no root in state" in result.reasoning


async def test_the_import_graph_answer_is_kept_whole_with_a_note_that_the_set_is_complete() -> None:
    state = state_with("exploring", task={"keywords": ["Widget"]})
    state, _, _ = await turn(state)
    result = await ExplorationCoordinator().process(snap(state), "task")
    assert "importers of name 'Widget': 2 module(s), 1 re-export(s), 1 definition(s); set complete" in result.reasoning
    after = reduce(state, result.transitions)
    assert after.conversation_state["importers"]["Widget"] == IMPORTERS["results"][0]


async def test_only_code_like_keywords_are_looked_up_in_the_import_graph() -> None:
    state = state_with("exploring", task={"keywords": ["retry policy", "pkg.widgets", "Widget"]})
    result = await ExplorationCoordinator().process(snap(state), "task")
    assert planned_calls(result)[1] == ("find_importers", {"root": ROOT, "symbols": ["pkg.widgets", "Widget"]})
